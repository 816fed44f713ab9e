//! Tests of the Slurm adapter's exec settings: off by default, srun only with the bare
//! runtime, and how they parse.

use super::*;
use crate::provider::{ExecRequest, Provider};

#[tokio::test]
async fn exec_is_off_by_default_and_srun_needs_the_bare_runtime() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let owner = Owner::new("c", "n");
    let base = SlurmConfig {
        user_name: "vkslurm".into(),
        ..SlurmConfig::default()
    }
    .with_api_key("jwt");
    let off = Slurm::new("hpc".into(), base.clone(), owner.clone()).unwrap();
    assert!(!off.capabilities().exec);
    let req = ExecRequest {
        command: vec!["true".into()],
        stdin: false,
        tty: false,
    };
    match off.exec("1", req.clone()).await {
        Err(ProviderError::Unsupported { provider, what }) => {
            assert_eq!(provider, "hpc");
            assert!(what.contains("exec: srun"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    let on = SlurmConfig {
        exec: ExecMode::Srun,
        ..base.clone()
    };
    let srun = Slurm::new("hpc".into(), on.clone(), owner.clone()).unwrap();
    assert!(srun.capabilities().exec);
    assert!(matches!(
        srun.exec("not-a-job", req).await,
        Err(ProviderError::Invalid { .. })
    ));
    let apptainer = SlurmConfig {
        runtime: Runtime::Apptainer,
        ..on.clone()
    };
    let e = Slurm::new("hpc".into(), apptainer, owner.clone()).unwrap_err();
    assert!(e.to_string().contains("runtime: bare"), "{e}");
    let wrapper = SlurmConfig {
        exec_wrapper: vec!["sudo".into(), String::new()],
        ..on
    };
    assert!(Slurm::new("hpc".into(), wrapper, owner).is_err());
}

#[test]
fn exec_settings_parse() {
    let cfg: SlurmConfig = serde_saphyr::from_str(
        "userName: u\nexec: srun\nsrunPath: /opt/slurm/bin/srun\nexecWrapper: [runuser, -u, u, --]\nslurmConf: /etc/slurm/slurm.conf\n",
    )
    .unwrap();
    assert_eq!(cfg.exec, ExecMode::Srun);
    assert_eq!(cfg.srun_path, "/opt/slurm/bin/srun");
    assert_eq!(cfg.exec_wrapper, ["runuser", "-u", "u", "--"]);
    assert_eq!(
        cfg.slurm_conf.as_deref(),
        Some(std::path::Path::new("/etc/slurm/slurm.conf"))
    );
    let cfg: SlurmConfig = serde_saphyr::from_str("userName: u\n").unwrap();
    assert_eq!((cfg.exec, cfg.srun_path.as_str()), (ExecMode::Off, "srun"));
    assert!(serde_saphyr::from_str::<SlurmConfig>("exec: ssh\n").is_err());
}
