//! Pods only some providers can take: every container run (Slurm's steps), UDP ports, a disk
//! above a provider's ceiling.

use super::*;

/// Why no provider the pod may go to (all, or the one it pins) can run it as it is: only one
/// that runs every container can take it (`steps_only`), or only one that serves UDP.
pub(super) fn capability_refusal(rules: &Rules<'_>, request: &Request) -> Option<Refusal> {
    let may: Vec<&dispatch::Offer> = rules
        .offers
        .iter()
        .filter(|o| {
            request
                .pinned_provider
                .as_ref()
                .is_none_or(|pin| *pin == o.name)
        })
        .collect();
    if let Some(why) = &request.steps_only
        && !may.iter().any(|o| o.capabilities.containers)
    {
        return Some((reason::INVALID_SPEC, why.clone()));
    }
    if let Some(refused) = disk_refusal(&may, request) {
        return Some(refused);
    }
    if let Some(refused) = cuda_refusal(&may, request) {
        return Some(refused);
    }
    if !request.udp_ports.is_empty() && !may.iter().any(|o| o.capabilities.udp) {
        let ports: Vec<String> = request
            .udp_ports
            .iter()
            .map(|p| format!("{p}/UDP"))
            .collect();
        let names: Vec<&str> = may.iter().map(|o| o.name.as_str()).collect();
        return Some((
            reason::INVALID_SPEC,
            format!(
                "container port {} is UDP, and provider {} serves TCP ports only (RunPod \
                 publishes tcp and http ports; the Vast and kubernetes adapters publish TCP): \
                 remove the port, declare it TCP, or pin a provider that serves UDP (Slurm)",
                ports.join(", "),
                names.join(", ")
            ),
        ));
    }
    None
}

/// The pod asks for more container disk (`gpu-vk.io/disk_gb`, else its `ephemeral-storage`)
/// than every provider it may use allows (`maxDiskGb`).
fn disk_refusal(may: &[&dispatch::Offer], request: &Request) -> Option<Refusal> {
    let (key, asked) = request.disk_asked()?;
    let fits = |o: &&&dispatch::Offer| {
        o.capabilities
            .max_disk_gb
            .is_none_or(|max| asked <= f64::from(max))
    };
    if may.is_empty() || may.iter().any(|o| fits(&o)) {
        return None;
    }
    let limits: Vec<String> = may
        .iter()
        .map(|o| {
            format!(
                "{} at most {} GB",
                o.name,
                o.capabilities.max_disk_gb.unwrap_or_default()
            )
        })
        .collect();
    let what = if key == "disk_gb" {
        format!("the annotation {}disk-gb", crate::vocab::names::PREFIX)
    } else {
        "its ephemeral-storage request".to_owned()
    };
    Some((
        reason::INVALID_SPEC,
        format!(
            "the pod asks for {asked} GB of container disk ({what}), more than its providers \
             allow ({}; maxDiskGb in the virtual kubelet's configuration)",
            limits.join(", ")
        ),
    ))
}

/// The pod needs a CUDA version (`gpu-vk.io/min-cuda`) above what every provider it may use is
/// declared to run (`maxCudaVersion`); a provider that declares none may run it.
fn cuda_refusal(may: &[&dispatch::Offer], request: &Request) -> Option<Refusal> {
    let floor = request.min_cuda()?;
    let max = |o: &dispatch::Offer| {
        o.capabilities
            .max_cuda
            .as_deref()
            .and_then(spec::cuda_version)
    };
    if may.is_empty() || may.iter().any(|o| max(o).is_none_or(|m| m >= floor)) {
        return None;
    }
    let limits: Vec<String> = may
        .iter()
        .map(|o| {
            format!(
                "{} at most {}",
                o.name,
                o.capabilities.max_cuda.as_deref().unwrap_or_default()
            )
        })
        .collect();
    Some((
        reason::INVALID_SPEC,
        format!(
            "the pod needs CUDA {}.{} or later (gpu-vk.io/min-cuda), above what its providers' \
             hosts run ({}; maxCudaVersion in the virtual kubelet's configuration)",
            floor.0,
            floor.1,
            limits.join(", ")
        ),
    ))
}
