//! A Slurm release in a container of one test's own, started through testcontainers from the
//! image `scripts/slurm/image` builds (`SLURM_IMAGE`, e.g. `gpu-vk/slurm:trixie-<hash>`) and
//! removed when the test ends, as `scripts/slurm/container-up` starts one for the conformance
//! suite: slurmrestd on a published port, the job output folder mounted at the same path (the
//! adapter reads logs there as on a shared file system), a JWT minted with `scontrol token`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use testcontainers::core::{IntoContainerPort, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::env::Env;

/// slurm.conf inside the image (its entrypoint writes it).
const CONF: &str = "/etc/slurm/slurm.conf";
/// The job user the image creates.
const JOB_USER: &str = "vkslurm";
/// Where each test's container gets a folder (job output, token) on the host.
const ROOT: &str = "/var/lib/gpu-vk/slurm-tests";
/// How long the daemons may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The container of one test and its folder on the host; both removed when dropped.
pub(super) struct OwnSlurm {
    _container: ContainerAsync<GenericImage>,
    dir: PathBuf,
}

impl Drop for OwnSlurm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a container of `image` and waits until its node is idle and slurmrestd answers.
pub(super) async fn start(image: &str) -> (Env, OwnSlurm) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (repository, tag) = image
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("SLURM_IMAGE {image:?} is not repository:tag"));
    let dir = PathBuf::from(ROOT).join(uuid::Uuid::new_v4().simple().to_string());
    let output = dir.join("output");
    std::fs::create_dir_all(&output).expect("job output folder");
    // Written by the job user inside the container.
    std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = output.to_str().expect("a UTF-8 path");
    let container = GenericImage::new(repository, tag)
        .with_exposed_port(6820.tcp())
        .with_wait_for(WaitFor::Nothing)
        .with_hostname("slurm-test")
        .with_mount(Mount::bind_mount(out, out))
        .with_env_var("SLURM_OUTPUT_DIR", out)
        .start()
        .await
        .unwrap_or_else(|e| panic!("cannot start a container of {image}: {e}"));
    let id = container.id().to_owned();
    let port = container.get_host_port_ipv4(6820.tcp()).await.unwrap();
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&id, &url).await;

    let token = exec(
        &id,
        &[
            "scontrol",
            "token",
            &format!("username={JOB_USER}"),
            "lifespan=3600",
        ],
    );
    let token = token.trim().trim_start_matches("SLURM_JWT=");
    assert!(!token.is_empty(), "slurmctld minted an empty JWT");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let version = exec(&id, &["sinfo", "-V"]);
    let env = Env {
        url,
        user: JOB_USER.into(),
        token_file,
        output_dir: output,
        partition: "debug".into(),
        urgent_partition: "urgent".into(),
        slurm_conf: CONF.into(),
        container: Some(id),
        expect_dialect: super::env::expected_dialect(std::env::var("SLURM_EXPECT_DIALECT").ok()),
        version: version.split_whitespace().last().map(str::to_owned),
        // The container's cgroups are read-only: its Slurm enforces no memory limit.
        memory_limits: false,
    };
    let own = OwnSlurm {
        _container: container,
        dir,
    };
    (env, own)
}

/// Polls until the node is idle (or busy) and slurmrestd answers (401 without a token is
/// fine), or panics with what was last seen.
async fn wait_ready(id: &str, url: &str) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::new();
    while Instant::now() < deadline {
        let state = run(id, &["sinfo", "-h", "-o", "%t"]).unwrap_or_default();
        let idle = ["idle", "mix", "alloc"]
            .iter()
            .any(|s| state.trim().starts_with(s));
        let rest = http
            .get(format!("{url}/openapi/v3"))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .is_ok();
        if idle && rest {
            return;
        }
        last = format!("node state {:?}, slurmrestd answers: {rest}", state.trim());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the Slurm in container {id} was not ready within {READY_WITHIN:?}: {last}");
}

/// A Slurm command in the container: its stdout, or None when it failed.
fn run(id: &str, args: &[&str]) -> Option<String> {
    let (program, rest) = args.split_first()?;
    let out = super::env::slurm_command(Some(id), CONF, program)
        .args(rest)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A Slurm command in the container that must succeed: its stdout.
fn exec(id: &str, args: &[&str]) -> String {
    run(id, args).unwrap_or_else(|| panic!("`{}` failed in container {id}", args.join(" ")))
}
