//! What a RunPod container runs: the image's ENTRYPOINT followed by the pod's `args` (v2:
//! "arguments passed to the container entrypoint"), or by the image's CMD when `args` is
//! empty, as `docker run IMAGE ARGS...` does. v2 has no field to replace the ENTRYPOINT (v1's
//! `dockerEntrypoint` / `dockerStartCmd` are gone). The emulator knows a few public images'
//! ENTRYPOINT and CMD (from their Dockerfiles); an image it does not know has neither, so its
//! `args` run as they are.

/// (repository, ENTRYPOINT, CMD) of the images the emulator knows.
const IMAGES: &[(&str, &[&str], &[&str])] = &[
    ("busybox", &[], &["sh"]),
    ("alpine", &[], &["/bin/sh"]),
    ("ubuntu", &[], &["/bin/bash"]),
    ("python", &[], &["python3"]),
    ("runpod/pytorch", &[], &["/start.sh"]),
    ("vllm/vllm-openai", &["vllm", "serve"], &[]),
];

/// ENTRYPOINT and CMD of `image` (a reference with or without tag, digest or registry).
pub fn defaults(image: &str) -> (&'static [&'static str], &'static [&'static str]) {
    let repo = image.split('@').next().unwrap_or(image);
    // A tag follows the last ':' after the last '/' (a registry port comes before a '/').
    let repo = match repo.rfind(':') {
        Some(i) if !repo[i..].contains('/') => &repo[..i],
        _ => repo,
    };
    // A first component with a '.' or ':' names a registry host: not part of the image name.
    let repo = match repo.split_once('/') {
        Some((host, rest)) if host.contains(['.', ':']) || host == "localhost" => rest,
        _ => repo,
    };
    let repo = repo.strip_prefix("library/").unwrap_or(repo);
    IMAGES
        .iter()
        .find(|(name, _, _)| *name == repo)
        .map(|(_, e, c)| (*e, *c))
        .unwrap_or((&[], &[]))
}

/// The shell line the container runs (`None`: nothing, the container just stays up). `args`
/// is split into words as a POSIX shell would.
pub fn command_line(image: &str, args: &str) -> Option<String> {
    let (entrypoint, cmd) = defaults(image);
    let mut parts: Vec<String> = entrypoint
        .iter()
        .map(|w| crate::util::shell_quote(w))
        .collect();
    if args.trim().is_empty() {
        parts.extend(cmd.iter().map(|w| crate::util::shell_quote(w)));
    } else {
        parts.push(args.to_owned());
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_the_entrypoint_and_replace_the_cmd() {
        // An ENTRYPOINT image: args are its arguments.
        assert_eq!(
            command_line("vllm/vllm-openai:v0.9.0", "--model m").as_deref(),
            Some("vllm serve --model m")
        );
        assert_eq!(
            command_line("vllm/vllm-openai", "").as_deref(),
            Some("vllm serve")
        );
        // A CMD image: args replace the CMD.
        assert_eq!(
            command_line("mirror.local/library/python:3.12-slim", "").as_deref(),
            Some("python3")
        );
        assert_eq!(
            command_line("python:3.12", "sh -c 'exit 3'").as_deref(),
            Some("sh -c 'exit 3'")
        );
        // Unknown image, no args: nothing to run.
        assert_eq!(command_line("ghcr.io/acme/x:1", ""), None);
        assert_eq!(
            command_line("mirror.local:5000/busybox", "").as_deref(),
            Some("sh")
        );
        assert_eq!(
            command_line("busybox@sha256:abc", "").as_deref(),
            Some("sh")
        );
    }
}
