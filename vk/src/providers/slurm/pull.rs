//! Registry logins for Slurm's container runtimes. Apptainer reads a registry login from
//! `APPTAINER_DOCKER_USERNAME` and `APPTAINER_DOCKER_PASSWORD` ("These environment variables
//! will override any stored credentials", apptainer-userdocs `docker_and_oci.rst`), and never
//! forwards a host variable starting with `APPTAINER_` into the container (`SetContainerEnv`,
//! `internal/pkg/util/env/create.go` in apptainer/apptainer, whatever `--cleanenv` says). So
//! the login travels as the pod's Secret values do: in the job's `environment` under transport
//! names, copied by the script to those two variables, never written into the script. It is a
//! Secret value: `pullSecrets` decides whether Slurm may receive it, as `secretEnv` does for
//! the environment. One login per job (Apptainer takes one): the main container's image's.
//!
//! enroot (pyxis) reads logins from a netrc file, `$ENROOT_CONFIG_PATH/.credentials`
//! ("following the netrc file format", NVIDIA/enroot `doc/cmd/import.md`; Docker Hub's machine
//! is `auth.docker.io`), and pyxis sets every exported job variable in the container, so the
//! login cannot stay in a variable: the script writes it (from the transport variables, with
//! `printf`, never into the script) to `.credentials` in a fresh `mktemp -d` directory (mode
//! 0700, the file 0600 under `umask 077`), points `ENROOT_CONFIG_PATH` there, and removes the
//! directory when the job ends (an `EXIT` trap, so the step is run rather than `exec`ed).
//! netrc fields are whitespace-separated and a password starting with `$` is evaluated by
//! enroot's shell: such a login is refused with the reason.

use std::collections::BTreeMap;

use super::Runtime;
use crate::provider::{ProviderError, Workload};
use crate::vocab::shell::quote;

/// The registry login of a job: its transport values and the script lines that hand them to
/// the runtime.
pub struct Login {
    pub environment: BTreeMap<String, String>,
    pub lines: String,
    /// The script must outlive the runtime (it removes the credentials file at exit).
    pub keep_shell: bool,
}

/// The login `w`'s main image pulls with under `runtime`, with transport names after
/// `prefix`; `Ok(None)` without a login or for a runtime that pulls nothing; `Err` for a login
/// enroot's netrc cannot hold.
pub fn login(w: &Workload, runtime: Runtime, prefix: &str) -> Result<Option<Login>, ProviderError> {
    if runtime == Runtime::Bare {
        return Ok(None);
    }
    let image = if w.image.is_empty() {
        w.containers
            .first()
            .map(|c| c.image.as_str())
            .unwrap_or_default()
    } else {
        w.image.as_str()
    };
    let Some(l) = w.login_for(image) else {
        return Ok(None);
    };
    let (user, password) = (
        format!("{prefix}PULL_USER"),
        format!("{prefix}PULL_PASSWORD"),
    );
    let environment = BTreeMap::from([
        (user.clone(), l.username.clone()),
        (password.clone(), l.password.clone()),
    ]);
    if runtime == Runtime::Apptainer {
        return Ok(Some(Login {
            environment,
            lines: format!(
                "# The registry login comes from the job's environment too; apptainer keeps APPTAINER_* out of the container.\n\
                 export APPTAINER_DOCKER_USERNAME=\"${user}\" APPTAINER_DOCKER_PASSWORD=\"${password}\"\n\
                 export -n {user} {password}\n"
            ),
            keep_shell: false,
        }));
    }
    let netrc_word = |v: &str| !v.is_empty() && !v.chars().any(char::is_whitespace);
    if !netrc_word(&l.username) || !netrc_word(&l.password) || l.password.starts_with('$') {
        return Err(ProviderError::Invalid {
            message: format!(
                "the registry login for {} cannot be given to enroot: its netrc file takes a user \
                 name and password without whitespace, and evaluates a password starting with $",
                l.registry
            ),
        });
    }
    let machine = if l.registry == crate::vocab::image::DOCKER_HUB {
        "auth.docker.io"
    } else {
        l.registry.as_str()
    };
    Ok(Some(Login {
        environment,
        lines: format!(
            "# The registry login goes from the job's environment into enroot's netrc, readable by this job's user only, removed when the job ends.\n\
             _gpuvk_enroot=$(mktemp -d)\n\
             trap 'rm -rf \"$_gpuvk_enroot\"' EXIT\n\
             (umask 077 && printf 'machine %s login %s password %s\\n' {} \"${user}\" \"${password}\" >\"$_gpuvk_enroot/.credentials\")\n\
             export ENROOT_CONFIG_PATH=\"$_gpuvk_enroot\"\n\
             export -n {user} {password}\n",
            quote(machine)
        ),
        keep_shell: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::RegistryLogin;

    #[test]
    fn apptainer_gets_the_login_through_the_job_environment_only() {
        let mut w = crate::test_support::workload();
        w.image = "registry.example.com/acme/app:1".into();
        w.registry_logins = vec![RegistryLogin {
            registry: "registry.example.com".into(),
            username: "robot".into(),
            password: "s3cret-pull-Pw".into(),
        }];
        let l = login(&w, Runtime::Apptainer, "_GPUVK_ENV_")
            .unwrap()
            .unwrap();
        assert_eq!(
            l.environment,
            BTreeMap::from([
                (
                    "_GPUVK_ENV_PULL_PASSWORD".to_owned(),
                    "s3cret-pull-Pw".to_owned()
                ),
                ("_GPUVK_ENV_PULL_USER".to_owned(), "robot".to_owned()),
            ])
        );
        assert!(
            !l.lines.contains("s3cret") && !l.lines.contains("robot"),
            "{}",
            l.lines
        );
        assert!(
            l.lines
                .contains("APPTAINER_DOCKER_PASSWORD=\"$_GPUVK_ENV_PULL_PASSWORD\"")
        );
        assert!(login(&w, Runtime::Bare, "_GPUVK_ENV_").unwrap().is_none());
        let e = login(&w, Runtime::Enroot, "_GPUVK_ENV_").unwrap().unwrap();
        assert!(e.keep_shell && !e.lines.contains("s3cret"), "{}", e.lines);
        assert!(
            e.lines.contains("'registry.example.com'") && e.lines.contains("ENROOT_CONFIG_PATH")
        );
        w.image = "ghcr.io/other/app:1".into();
        assert!(
            login(&w, Runtime::Apptainer, "_GPUVK_ENV_")
                .unwrap()
                .is_none(),
            "another registry"
        );
    }

    #[test]
    fn enroot_gets_a_private_netrc_that_is_gone_when_the_job_ends() {
        let mut w = crate::test_support::workload();
        w.image = "registry.example.com/acme/app:1".into();
        w.registry_logins = vec![RegistryLogin {
            registry: "registry.example.com".into(),
            username: "robot".into(),
            password: "s3cret-pull-Pw".into(),
        }];
        let l = login(&w, Runtime::Enroot, "_T_").unwrap().unwrap();
        // Run the lines as the job would, with the transport variables in its environment.
        let dir = std::env::temp_dir().join(format!("gpuvk-netrc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            "set -eu\nexport TMPDIR={}\n{}stat -c %a \"$ENROOT_CONFIG_PATH\" \"$ENROOT_CONFIG_PATH/.credentials\"\ncat \"$ENROOT_CONFIG_PATH/.credentials\"\nenv | grep -c _T_PULL || true\n",
            dir.display(),
            l.lines
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .envs(&l.environment)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            text, "700\n600\nmachine registry.example.com login robot password s3cret-pull-Pw\n0\n",
            "private, the login in netrc form, the transport variables no longer exported"
        );
        // The EXIT trap removed the directory.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
        // What netrc cannot hold is refused.
        w.registry_logins[0].password = "$(id)".into();
        assert!(login(&w, Runtime::Enroot, "_T_").is_err());
        w.registry_logins[0].password = "two words".into();
        assert!(login(&w, Runtime::Enroot, "_T_").is_err());
    }
}
