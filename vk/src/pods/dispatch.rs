//! Dispatch: which providers may run a pod, in which order.
//!
//! A pinned provider (`gpu-vk.io/provider`) is the only candidate. Otherwise the provider
//! already recorded on the pod comes first (its choice survives restarts), then every
//! configured provider whose capabilities fit the request, in configuration order; a capacity
//! error moves on to the next. Richer policies (price, health) slot in by reordering here.

use crate::config::SecretEnv;
use crate::pods::spec::Request;
use crate::provider::Capabilities;

/// A provider as dispatch sees it: its name, what it can run, and whether it may receive
/// Secret-sourced environment values (see [`super::secrets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    pub name: String,
    pub capabilities: Capabilities,
    pub secret_env: SecretEnv,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("pod pins provider {0:?}, which is not configured on this node")]
    UnknownProvider(String),
    #[error("no configured provider offers {0}")]
    NoMatch(String),
}

/// Indexes of the providers to try, best first.
pub fn candidates(
    providers: &[Offer],
    req: &Request,
    assigned: Option<&str>,
) -> Result<Vec<usize>, Error> {
    if let Some(pin) = &req.pinned_provider {
        let i = providers
            .iter()
            .position(|p| &p.name == pin)
            .ok_or_else(|| Error::UnknownProvider(pin.clone()))?;
        if !fits(&providers[i], req) {
            return Err(Error::NoMatch(format!(
                "{} (pinned provider {pin})",
                describe(req)
            )));
        }
        return Ok(vec![i]);
    }
    let mut out: Vec<usize> = (0..providers.len())
        .filter(|&i| fits(&providers[i], req))
        .collect();
    if let Some(a) = assigned
        && let Some(pos) = out.iter().position(|&i| providers[i].name == a)
    {
        let i = out.remove(pos);
        out.insert(0, i);
    }
    if out.is_empty() {
        return Err(Error::NoMatch(describe(req)));
    }
    Ok(out)
}

fn fits(p: &Offer, req: &Request) -> bool {
    let caps = &p.capabilities;
    let Some(gpu) = &req.gpu else {
        return !caps.gpu_only;
    };
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
    use crate::provider::GpuRequest;

    fn offer(name: &str, types: &[&str], max: u32) -> Offer {
        Offer {
            name: name.into(),
            capabilities: Capabilities {
                gpu_types: types.iter().map(|s| s.to_string()).collect(),
                max_gpus_per_workload: max,
                ..Default::default()
            },
            secret_env: SecretEnv::Allow,
        }
    }

    fn providers() -> Vec<Offer> {
        vec![
            offer("runpod", &["A100-80GB", "H100"], 8),
            offer("vast", &["RTX4090"], 4),
            offer("slurm", &[], 2),
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

    #[test]
    fn cpu_only_pods_skip_gpu_only_providers() {
        let mut ps = providers();
        ps[0].capabilities.gpu_only = true;
        let cpu = |pin: Option<&str>| Request {
            gpu: None,
            ..req(None, 1, pin)
        };
        // Skipped as a candidate, not a reason to fail the pod.
        assert_eq!(candidates(&ps, &cpu(None), None).unwrap(), vec![1, 2]);
        assert_eq!(
            candidates(&ps, &cpu(None), Some("runpod")).unwrap(),
            vec![1, 2]
        );
        // GPU pods still go there.
        assert_eq!(
            candidates(&ps, &req(Some("H100"), 1, None), None).unwrap(),
            vec![0, 2]
        );
        // Pinned to a provider that cannot run it: a clear failure.
        assert!(matches!(
            candidates(&ps, &cpu(Some("runpod")), None),
            Err(Error::NoMatch(m)) if m.contains("CPU-only")
        ));
        for p in &mut ps {
            p.capabilities.gpu_only = true;
        }
        assert!(matches!(
            candidates(&ps, &cpu(None), None),
            Err(Error::NoMatch(_))
        ));
    }
}
