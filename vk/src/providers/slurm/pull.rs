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
//! enroot (pyxis) is given none yet: its logins live in a netrc file
//! (`$ENROOT_CONFIG_PATH/.credentials`, NVIDIA/enroot `doc/cmd/import.md`) and pyxis sets every
//! exported job variable in the container, so a login needs a private file removed after the
//! import; a pod naming pull Secrets skips an enroot provider (`registry_logins`).

use std::collections::BTreeMap;

use super::Runtime;
use crate::provider::Workload;

/// The registry login of a job: its transport values and the script lines that hand them to
/// the runtime.
pub struct Login {
    pub environment: BTreeMap<String, String>,
    pub lines: String,
}

/// The login `w`'s main image pulls with under `runtime`, with transport names after
/// `prefix`; `None` without a login or for a runtime that takes none.
pub fn login(w: &Workload, runtime: Runtime, prefix: &str) -> Option<Login> {
    if runtime != Runtime::Apptainer {
        return None;
    }
    let image = if w.image.is_empty() {
        w.containers.first().map(|c| c.image.as_str())?
    } else {
        w.image.as_str()
    };
    let l = w.login_for(image)?;
    let (user, password) = (
        format!("{prefix}PULL_USER"),
        format!("{prefix}PULL_PASSWORD"),
    );
    Some(Login {
        environment: BTreeMap::from([
            (user.clone(), l.username.clone()),
            (password.clone(), l.password.clone()),
        ]),
        lines: format!(
            "# The registry login comes from the job's environment too; apptainer keeps APPTAINER_* out of the container.\n\
             export APPTAINER_DOCKER_USERNAME=\"${user}\" APPTAINER_DOCKER_PASSWORD=\"${password}\"\n\
             export -n {user} {password}\n"
        ),
    })
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
        let l = login(&w, Runtime::Apptainer, "_GPUVK_ENV_").unwrap();
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
        assert!(login(&w, Runtime::Bare, "_GPUVK_ENV_").is_none());
        assert!(login(&w, Runtime::Enroot, "_GPUVK_ENV_").is_none());
        w.image = "ghcr.io/other/app:1".into();
        assert!(
            login(&w, Runtime::Apptainer, "_GPUVK_ENV_").is_none(),
            "another registry"
        );
    }
}
