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

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVarSource, Pod, Secret};
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

/// Resolves the env of container `c` of `pod`: `envFrom` first, then `env`, whose entries win
/// and may refer to what came before.
async fn resolve_container(
    pod: &Pod,
    c: &Container,
    src: &impl Source,
    node_ip: &str,
) -> Result<Resolved, Error> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut out = Resolved::default();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match src.config_map(&ns, &r.name).await? {
                Some(data) => data
                    .into_iter()
                    .for_each(|(k, v)| out.set_from(format!("{prefix}{k}"), v)),
                None if r.optional == Some(true) => {}
                None => return Err(Error::Missing(format!("configmap {:?} not found", r.name))),
            }
        }
        if let Some(r) = &from.secret_ref {
            match src.secret(&ns, &r.name).await? {
                Some(data) => data
                    .into_iter()
                    .for_each(|(k, v)| out.set_from(format!("{prefix}{k}"), v)),
                None if r.optional == Some(true) => {}
                None => return Err(Error::Missing(format!("secret {:?} not found", r.name))),
            }
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(v) = &e.value {
            let v = expand(v, &out.vars);
            out.set(e.name.clone(), v);
            continue;
        }
        let Some(vf) = &e.value_from else {
            out.set(e.name.clone(), String::new());
            continue;
        };
        if let Some(v) = value_from(pod, c, &e.name, vf, src, &ns, node_ip).await? {
            out.set(e.name.clone(), v);
        }
    }
    Ok(out)
}

impl Resolved {
    /// Sets `name`, replacing a value set before (a later source wins, as on a kubelet).
    fn set(&mut self, name: String, value: String) {
        if let Some(e) = self.vars.iter_mut().find(|e| e.name == name) {
            e.value = value;
        } else {
            self.vars.push(EnvVar { name, value });
        }
    }

    /// Sets a key of an `envFrom` source, or skips it when it is not a variable name.
    fn set_from(&mut self, name: String, value: String) {
        if !is_env_name(&name) {
            self.skipped.push(name);
            return;
        }
        self.set(name, value);
    }
}

/// The value of env `name` from its `valueFrom` source, in namespace `ns`; `None` when an
/// optional ConfigMap, Secret or key is missing (the variable is then left unset).
async fn value_from(
    pod: &Pod,
    c: &Container,
    name: &str,
    vf: &EnvVarSource,
    src: &impl Source,
    ns: &str,
    node_ip: &str,
) -> Result<Option<String>, Error> {
    if let Some(r) = &vf.config_map_key_ref {
        let optional = r.optional == Some(true);
        let data = src.config_map(ns, &r.name).await?;
        key_of(data, "ConfigMap", ns, &r.name, &r.key, optional)
    } else if let Some(r) = &vf.secret_key_ref {
        let optional = r.optional == Some(true);
        let data = src.secret(ns, &r.name).await?;
        key_of(data, "Secret", ns, &r.name, &r.key, optional)
    } else if let Some(f) = &vf.field_ref {
        let v = field(pod, &f.field_path, node_ip).ok_or_else(|| {
            Error::Invalid(format!(
                "env {name}: unsupported fieldRef {:?}",
                f.field_path
            ))
        })?;
        Ok(Some(v))
    } else if let Some(r) = &vf.resource_field_ref {
        let v = resource_field(c, &r.resource).ok_or_else(|| {
            Error::Invalid(format!(
                "env {name}: unsupported resourceFieldRef {:?}",
                r.resource
            ))
        })?;
        Ok(Some(v))
    } else {
        Err(Error::Invalid(format!("env {name}: unsupported valueFrom")))
    }
}

/// The value of `key` in `data`, read from the ConfigMap or Secret (`kind`) `ns`/`name`
/// (`None`: not found); `None` when the source or the key is missing but `optional`.
fn key_of(
    data: Option<BTreeMap<String, String>>,
    kind: &str,
    ns: &str,
    name: &str,
    key: &str,
    optional: bool,
) -> Result<Option<String>, Error> {
    match data {
        Some(data) => match data.get(key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(Error::Missing(format!(
                "couldn't find key {key} in {kind} {ns}/{name}"
            ))),
        },
        None if optional => Ok(None),
        None => Err(Error::Missing(format!(
            "{} {name:?} not found",
            kind.to_lowercase()
        ))),
    }
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

fn resource_field(c: &Container, resource: &str) -> Option<String> {
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
