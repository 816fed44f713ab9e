//! Pods only some providers can take: every container run (Slurm's steps), UDP ports.

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
