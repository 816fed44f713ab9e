//! Resolves a container's environment the way the kubelet does: literal values, ConfigMap and
//! Secret keys (`valueFrom` and `envFrom`, honouring `optional`), and the downward API.
//!
//! A missing mandatory source keeps the pod Pending with `CreateContainerConfigError` (the
//! kubelet's behaviour) until it appears. Keys of an `envFrom` ConfigMap or Secret that are not
//! environment variable names are skipped and reported with the kubelet's own event
//! (`InvalidEnvironmentVariableNames`, `makeEnvironmentVariables` in the kubelet's
//! `kubelet_pods.go`). Our test is stricter than the kubelet's once
//! RelaxedEnvironmentVariableValidation is on (any printable ASCII but `=`): a name must be
//! `[A-Za-z_][A-Za-z0-9_]*`, because the keys reach shells (Slurm's batch script) and Vast
//! reads keys of its `env` object as docker options (`"-p 8080:8080"`, `"-v ..."`; see
//! `parse_env` in vast-ai/vast-cli `vast.py`), so a key like `-v /:/host` would mount the
//! machine. Values are never logged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::{Api, Client};

use crate::provider::EnvVar;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A mandatory ConfigMap, Secret or key is missing; the message names it (never a value).
    #[error("{0}")]
    Missing(String),
    /// The source exists but cannot be used (for example an unsupported fieldRef).
    #[error("{0}")]
    Invalid(String),
    #[error("failed to read {kind} {name}: {source}")]
    Api {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
}

/// A container's resolved environment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub vars: Vec<EnvVar>,
    /// `envFrom` keys (with their prefix) left out because they are not variable names.
    pub skipped: Vec<String>,
    /// The environment of every other container that runs (init containers, sidecars and
    /// further regular containers), by container name, for providers that run each
    /// container ([`crate::provider::Workload::containers`]).
    pub containers: BTreeMap<String, Vec<EnvVar>>,
}

pub use crate::provider::is_env_name;

/// Reads ConfigMaps and Secrets; a trait so resolution can be unit-tested without a cluster.
pub trait Source {
    fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, Error>> + Send;
    fn secret(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, Error>> + Send;
}

/// The real source: the Kubernetes API.
#[derive(Clone)]
pub struct KubeSource(pub Client);

impl Source for KubeSource {
    async fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let api: Api<ConfigMap> = Api::namespaced(self.0.clone(), ns);
        let cm = api.get_opt(name).await.map_err(|source| Error::Api {
            kind: "ConfigMap",
            name: name.to_owned(),
            source,
        })?;
        Ok(cm.map(|cm| {
            let mut data = cm.data.unwrap_or_default();
            for (k, v) in cm.binary_data.unwrap_or_default() {
                data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
            }
            data
        }))
    }

    async fn secret(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let api: Api<Secret> = Api::namespaced(self.0.clone(), ns);
        let s = api.get_opt(name).await.map_err(|source| Error::Api {
            kind: "Secret",
            name: name.to_owned(),
            source,
        })?;
        Ok(s.map(|s| {
            let mut data: BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.extend(s.string_data.unwrap_or_default());
            data
        }))
    }
}

/// Resolves the env of the pod's main container (the one every provider runs; same-image
/// init containers run in its environment there) and of each other container that runs.
pub async fn resolve(pod: &Pod, src: &impl Source, node_ip: &str) -> Result<Resolved, Error> {
    let Some(main) = crate::pods::spec::main_container(pod) else {
        return Ok(Resolved::default());
    };
    let mut resolved = resolve_container(pod, main, src, node_ip).await?;
    for c in crate::pods::spec::running_containers(pod) {
        if c.name == main.name {
            continue;
        }
        let own = resolve_container(pod, c, src, node_ip).await?;
        resolved.skipped.extend(own.skipped);
        resolved.containers.insert(c.name.clone(), own.vars);
    }
    resolved.skipped.sort();
    resolved.skipped.dedup();
    Ok(resolved)
}

/// Resolves the env of container `c` of `pod`.
async fn resolve_container(
    pod: &Pod,
    c: &k8s_openapi::api::core::v1::Container,
    src: &impl Source,
    node_ip: &str,
) -> Result<Resolved, Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut out: Vec<EnvVar> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut set_from = |name: String, value: String, out: &mut Vec<EnvVar>| {
        if !is_env_name(&name) {
            skipped.push(name);
            return;
        }
        if let Some(e) = out.iter_mut().find(|e| e.name == name) {
            e.value = value;
        } else {
            out.push(EnvVar { name, value });
        }
    };
    let set = |name: String, value: String, out: &mut Vec<EnvVar>| {
        if let Some(e) = out.iter_mut().find(|e| e.name == name) {
            e.value = value;
        } else {
            out.push(EnvVar { name, value });
        }
    };

    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match src.config_map(&ns, &r.name).await? {
                Some(data) => data
                    .into_iter()
                    .for_each(|(k, v)| set_from(format!("{prefix}{k}"), v, &mut out)),
                None if r.optional == Some(true) => {}
                None => return Err(Error::Missing(format!("configmap {:?} not found", r.name))),
            }
        }
        if let Some(r) = &from.secret_ref {
            match src.secret(&ns, &r.name).await? {
                Some(data) => data
                    .into_iter()
                    .for_each(|(k, v)| set_from(format!("{prefix}{k}"), v, &mut out)),
                None if r.optional == Some(true) => {}
                None => return Err(Error::Missing(format!("secret {:?} not found", r.name))),
            }
        }
    }

    for e in c.env.iter().flatten() {
        if let Some(v) = &e.value {
            set(e.name.clone(), expand(v, &out), &mut out);
            continue;
        }
        let Some(vf) = &e.value_from else {
            set(e.name.clone(), String::new(), &mut out);
            continue;
        };
        if let Some(r) = &vf.config_map_key_ref {
            let optional = r.optional == Some(true);
            match src.config_map(&ns, &r.name).await? {
                Some(data) => match data.get(&r.key) {
                    Some(v) => set(e.name.clone(), v.clone(), &mut out),
                    None if optional => {}
                    None => {
                        return Err(Error::Missing(format!(
                            "couldn't find key {} in ConfigMap {}/{}",
                            r.key, ns, r.name
                        )));
                    }
                },
                None if optional => {}
                None => return Err(Error::Missing(format!("configmap {:?} not found", r.name))),
            }
        } else if let Some(r) = &vf.secret_key_ref {
            let optional = r.optional == Some(true);
            match src.secret(&ns, &r.name).await? {
                Some(data) => match data.get(&r.key) {
                    Some(v) => set(e.name.clone(), v.clone(), &mut out),
                    None if optional => {}
                    None => {
                        return Err(Error::Missing(format!(
                            "couldn't find key {} in Secret {}/{}",
                            r.key, ns, r.name
                        )));
                    }
                },
                None if optional => {}
                None => return Err(Error::Missing(format!("secret {:?} not found", r.name))),
            }
        } else if let Some(f) = &vf.field_ref {
            let v = field(pod, &f.field_path, node_ip).ok_or_else(|| {
                Error::Invalid(format!(
                    "env {}: unsupported fieldRef {:?}",
                    e.name, f.field_path
                ))
            })?;
            set(e.name.clone(), v, &mut out);
        } else if let Some(r) = &vf.resource_field_ref {
            let v = resource_field(c, &r.resource).ok_or_else(|| {
                Error::Invalid(format!(
                    "env {}: unsupported resourceFieldRef {:?}",
                    e.name, r.resource
                ))
            })?;
            set(e.name.clone(), v, &mut out);
        } else {
            return Err(Error::Invalid(format!(
                "env {}: unsupported valueFrom",
                e.name
            )));
        }
    }
    Ok(Resolved {
        vars: out,
        skipped,
        containers: BTreeMap::new(),
    })
}

/// `$(VAR)` expansion against variables defined earlier, as the kubelet does; `$$` escapes.
fn expand(v: &str, defined: &[EnvVar]) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("$(") {
            match t.find(')') {
                Some(end) => {
                    let name = &t[..end];
                    match defined.iter().find(|e| e.name == name) {
                        Some(e) => out.push_str(&e.value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &t[end + 1..];
                }
                None => {
                    out.push_str(tail);
                    rest = "";
                }
            }
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

fn field(pod: &Pod, path: &str, node_ip: &str) -> Option<String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let lookup = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref().and_then(|m| m.get(key).cloned())
    };
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => node_ip.to_owned(),
        "status.podIP" => pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default(),
        p => {
            if let Some(k) = p
                .strip_prefix("metadata.labels['")
                .and_then(|k| k.strip_suffix("']"))
            {
                lookup(&m.labels, k).unwrap_or_default()
            } else if let Some(k) = p
                .strip_prefix("metadata.annotations['")
                .and_then(|k| k.strip_suffix("']"))
            {
                lookup(&m.annotations, k).unwrap_or_default()
            } else {
                return None;
            }
        }
    })
}

fn resource_field(c: &k8s_openapi::api::core::v1::Container, resource: &str) -> Option<String> {
    let (kind, name) = resource.split_once('.')?;
    let res = c.resources.as_ref()?;
    let map = match kind {
        "limits" => res.limits.as_ref(),
        "requests" => res.requests.as_ref(),
        _ => None,
    }?;
    let q = map.get(name)?.0.clone();
    Some(match name {
        "cpu" => crate::vocab::quantity::parse_cpu(&q)
            .ok()?
            .div_ceil(1000)
            .to_string(),
        "memory" => crate::vocab::quantity::parse_memory(&q).ok()?.to_string(),
        _ => q,
    })
}

#[cfg(test)]
mod tests;
