//! Container image references as registries and the kubelet read them: the registry host
//! (Docker Hub when the first component names none), its port, and the repository path.

/// Docker Hub's registry host, as the kubelet's keyring names it.
pub const DOCKER_HUB: &str = "index.docker.io";

/// A registry location: host (lower case), port if given, and path without slashes at the ends.
#[derive(Debug, PartialEq, Eq)]
pub struct Location {
    pub host: String,
    pub port: Option<String>,
    pub path: String,
}

impl Location {
    /// A credential key (`https://index.docker.io/v1/`, `registry.example.com:5000/team`).
    pub fn key(raw: &str) -> Location {
        let raw = raw
            .trim()
            .strip_prefix("https://")
            .or_else(|| raw.trim().strip_prefix("http://"))
            .unwrap_or(raw.trim());
        let (hostport, path) = raw.split_once('/').unwrap_or((raw, ""));
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                (h, Some(p.to_owned()))
            }
            _ => (hostport, None),
        };
        let mut host = host.to_ascii_lowercase();
        let mut path = path.trim_matches('/').to_owned();
        if host == "docker.io" || host == "registry-1.docker.io" {
            host = DOCKER_HUB.into();
        }
        // The legacy Docker Hub key names its API version, not a repository.
        if host == DOCKER_HUB && path == "v1" {
            path.clear();
        }
        Location { host, port, path }
    }
}

/// Where an image pulls from: its registry host (Docker Hub when the first component names
/// no host) and repository path (without tag or digest).
pub fn reference(image: &str) -> Location {
    let name = image.split('@').next().unwrap_or(image);
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            Location::key(name).with_path(rest)
        }
        _ if name.contains('/') => Location::key(DOCKER_HUB).with_path(name),
        _ => Location::key(DOCKER_HUB).with_path(&format!("library/{name}")),
    }
}

impl Location {
    /// `host[:port]`, the registry as providers' logins name it.
    pub fn registry(&self) -> String {
        match &self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    fn with_path(mut self, path: &str) -> Self {
        self.path = path.trim_matches('/').to_owned();
        self
    }

    /// True when this key location serves `image` (the keyring's `URLsMatch`).
    pub fn serves(&self, image: &Location) -> bool {
        let key: Vec<&str> = self.host.split('.').collect();
        let target: Vec<&str> = image.host.split('.').collect();
        key.len() == target.len()
            && key.iter().zip(&target).all(|(k, t)| glob(k, t))
            && self.port == image.port
            // A string prefix, as the keyring's `URLsMatch` (`strings.HasPrefix`).
            && image.path.starts_with(&self.path)
    }
}

/// `*` matches any run of characters within one host label.
fn glob(pattern: &str, label: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == label,
        Some((pre, rest)) => {
            let Some(after) = label.strip_prefix(pre) else {
                return false;
            };
            (0..=after.len())
                .filter(|&i| after.is_char_boundary(i))
                .any(|i| glob(rest, &after[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_names_its_registry_or_docker_hub() {
        let r = reference("busybox:1.36");
        assert_eq!(
            (r.host.as_str(), r.path.as_str()),
            (DOCKER_HUB, "library/busybox")
        );
        assert_eq!(reference("acme/app@sha256:00").path, "acme/app");
        let r = reference("registry.example.com:5000/team/app:v1");
        assert_eq!(r.registry(), "registry.example.com:5000");
        assert_eq!(r.path, "team/app");
        assert_eq!(reference("localhost/app").host, "localhost");
        assert_eq!(
            reference("docker.io/library/python:3").registry(),
            DOCKER_HUB
        );
    }

    #[test]
    fn keys_match_by_label_glob_port_and_path_prefix() {
        let img = reference("eu.registry.example.com/team/app:1");
        assert!(Location::key("https://*.registry.example.com").serves(&img));
        assert!(Location::key("eu.registry.example.com/team").serves(&img));
        // A path is a string prefix, as the kubelet's keyring reads it.
        assert!(Location::key("eu.registry.example.com/tea").serves(&img));
        assert!(!Location::key("eu.registry.example.com/other").serves(&img));
        // A glob stays within one label.
        assert!(!Location::key("*.example.com").serves(&img));
        // The port must be equal.
        assert!(!Location::key("eu.registry.example.com:443").serves(&img));
        // The legacy Docker Hub key serves every Docker Hub image.
        assert!(Location::key("https://index.docker.io/v1/").serves(&reference("busybox")));
        assert!(Location::key("docker.io").serves(&reference("acme/private:1")));
    }
}
