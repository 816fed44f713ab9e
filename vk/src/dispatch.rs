//! Dispatch: which providers may run a pod, in which order.
//!
//! A pinned provider (`gpu-vk.io/provider`) is the only candidate. Otherwise the provider
//! already recorded on the pod comes first (its choice survives restarts), then every
//! configured provider whose capabilities fit the request, in configuration order; a capacity
//! error moves on to the next. Richer policies (price, health) slot in by reordering here.

use std::sync::Arc;

use crate::provider::DynProvider;
use crate::spec::Request;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("pod pins provider {0:?}, which is not configured on this node")]
    UnknownProvider(String),
    #[error("no configured provider offers {0}")]
    NoMatch(String),
}

/// Indexes of the providers to try, best first.
pub fn candidates(
    providers: &[Arc<dyn DynProvider>],
    req: &Request,
    assigned: Option<&str>,
) -> Result<Vec<usize>, Error> {
    if let Some(pin) = &req.pinned_provider {
        let i = providers
            .iter()
            .position(|p| p.name() == pin)
            .ok_or_else(|| Error::UnknownProvider(pin.clone()))?;
        if !fits(providers[i].as_ref(), req) {
            return Err(Error::NoMatch(format!(
                "{} (pinned provider {pin})",
                describe(req)
            )));
        }
        return Ok(vec![i]);
    }
    let mut out: Vec<usize> = (0..providers.len())
        .filter(|&i| fits(providers[i].as_ref(), req))
        .collect();
    if let Some(a) = assigned
        && let Some(pos) = out.iter().position(|&i| providers[i].name() == a)
    {
        let i = out.remove(pos);
        out.insert(0, i);
    }
    if out.is_empty() {
        return Err(Error::NoMatch(describe(req)));
    }
    Ok(out)
}

fn fits(p: &dyn DynProvider, req: &Request) -> bool {
    let caps = p.capabilities();
    let Some(gpu) = &req.gpu else { return true };
    if caps.max_gpus_per_workload > 0 && gpu.count > caps.max_gpus_per_workload {
        return false;
    }
    match &gpu.gpu_type {
        Some(t) if !caps.gpu_types.is_empty() => {
            caps.gpu_types.iter().any(|c| c.eq_ignore_ascii_case(t))
        }
        _ => true,
    }
}

fn describe(req: &Request) -> String {
    match &req.gpu {
        Some(g) => format!(
            "{} x {}",
            g.count,
            g.gpu_type.as_deref().unwrap_or("any GPU")
        ),
        None => "a CPU-only workload".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Capabilities, GpuRequest, Observed, Provider, ProviderError, Workload};

    struct P(&'static str, Vec<&'static str>, u32);
    impl Provider for P {
        fn name(&self) -> &str {
            self.0
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                gpu_types: self.1.iter().map(|s| s.to_string()).collect(),
                max_gpus_per_workload: self.2,
                ..Default::default()
            }
        }
        async fn create(&self, _: &Workload) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn delete(&self, _: &str) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn list(&self) -> Result<Vec<Observed>, ProviderError> {
            Ok(vec![])
        }
    }

    fn providers() -> Vec<Arc<dyn DynProvider>> {
        vec![
            Arc::new(P("runpod", vec!["A100-80GB", "H100"], 8)),
            Arc::new(P("vast", vec!["RTX4090"], 4)),
            Arc::new(P("slurm", vec![], 2)),
        ]
    }

    fn req(t: Option<&str>, n: u32, pin: Option<&str>) -> Request {
        Request {
            pinned_provider: pin.map(str::to_owned),
            gpu: Some(GpuRequest {
                gpu_type: t.map(str::to_owned),
                count: n,
            }),
            cpu_millis: None,
            memory_bytes: None,
            options: Default::default(),
        }
    }

    #[test]
    fn filters_by_type_and_count_in_config_order() {
        let ps = providers();
        assert_eq!(
            candidates(&ps, &req(Some("h100"), 1, None), None).unwrap(),
            vec![0, 2]
        );
        assert_eq!(
            candidates(&ps, &req(Some("RTX4090"), 4, None), None).unwrap(),
            vec![1]
        );
        assert_eq!(
            candidates(&ps, &req(None, 1, None), None).unwrap(),
            vec![0, 1, 2]
        );
        assert!(matches!(
            candidates(&ps, &req(Some("RTX4090"), 5, None), None),
            Err(Error::NoMatch(_))
        ));
    }

    #[test]
    fn assigned_first_and_pins_exclusive() {
        let ps = providers();
        assert_eq!(
            candidates(&ps, &req(None, 1, None), Some("slurm")).unwrap(),
            vec![2, 0, 1]
        );
        assert_eq!(
            candidates(&ps, &req(None, 1, Some("vast")), Some("runpod")).unwrap(),
            vec![1]
        );
        assert_eq!(
            candidates(&ps, &req(None, 1, Some("nope")), None),
            Err(Error::UnknownProvider("nope".into()))
        );
    }
}
