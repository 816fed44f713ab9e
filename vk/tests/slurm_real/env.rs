//! Which Slurm a test runs against: the one an env file describes (`SLURM_ENV_FILE`: the
//! host's 22.05 from `scripts/slurm/up`, shared by the tests, which take turns on its small
//! node), or a container of its own started from a release's image (`SLURM_IMAGE`) through
//! testcontainers and removed when the test ends (see [`super::container`]).

use std::ops::Deref;
use std::path::PathBuf;

use serde_json::Value;
use tokio::sync::MutexGuard;
use vk::providers::slurm::Dialect;

use super::container::OwnSlurm;

/// The Slurm of one test, and its container when the test started one.
pub(super) struct Cluster {
    env: Env,
    own: Option<OwnSlurm>,
}

impl Deref for Cluster {
    type Target = Env;
    fn deref(&self) -> &Env {
        &self.env
    }
}

impl Cluster {
    /// The test's turn on a shared Slurm; none is needed on a container of its own.
    pub(super) async fn turn(&self) -> Option<MutexGuard<'static, ()>> {
        match self.own {
            Some(_) => None,
            None => Some(SERIAL.lock().await),
        }
    }
}

/// The Slurm this test runs against (see the module docs). Without either variable the tests
/// fail, on purpose, saying how to start one: they must never pass without having run.
pub(super) async fn env() -> Cluster {
    if let Ok(image) = std::env::var("SLURM_IMAGE") {
        let (env, own) = super::container::start(&image).await;
        return Cluster {
            env,
            own: Some(own),
        };
    }
    let path = std::env::var("SLURM_ENV_FILE").unwrap_or_else(|_| {
        panic!(
            "neither SLURM_ENV_FILE nor SLURM_IMAGE is set: these tests need a real Slurm. Start \
             one with `scripts/slurm/up` (it prints the env file's path) and run \
             `SLURM_ENV_FILE=<that path> cargo test -p vk --test slurm_real`, or give a release's \
             image (`scripts/slurm/image trixie`) as SLURM_IMAGE, or run `make test`."
        )
    });
    Cluster {
        env: from_file(&path),
        own: None,
    }
}

/// One job at a time on the single small node.
pub(super) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(super) struct Env {
    pub(super) url: String,
    pub(super) user: String,
    pub(super) token_file: PathBuf,
    pub(super) output_dir: PathBuf,
    pub(super) partition: String,
    /// A partition whose jobs preempt those of `partition` (`SLURM_URGENT_PARTITION`).
    pub(super) urgent_partition: String,
    pub(super) slurm_conf: String,
    /// The container Slurm runs in (its commands run through `docker exec`).
    pub(super) container: Option<String>,
    /// The dialect `auto` must pick on this Slurm.
    pub(super) expect_dialect: Option<Dialect>,
    /// Its release (`SLURM_VERSION`; the host's 22.05 does not write it).
    pub(super) version: Option<String>,
    /// Slurm kills a job over its memory limit (`SLURM_MEMORY_LIMITS=cgroup`).
    pub(super) memory_limits: bool,
}

impl Env {
    /// A Slurm command (`scancel`, `scontrol`, `squeue`) against this cluster.
    pub(super) fn command(&self, program: &str) -> std::process::Command {
        slurm_command(self.container.as_deref(), &self.slurm_conf, program)
    }
}

/// `program` run with `SLURM_CONF=conf`, inside `container` (through `docker exec`) when given.
pub(super) fn slurm_command(
    container: Option<&str>,
    conf: &str,
    program: &str,
) -> std::process::Command {
    match container {
        Some(c) => {
            let mut cmd = std::process::Command::new("docker");
            cmd.args(["exec", "-e"])
                .arg(format!("SLURM_CONF={conf}"))
                .args([c, program]);
            cmd
        }
        None => {
            let mut cmd = std::process::Command::new(program);
            cmd.env("SLURM_CONF", conf);
            cmd
        }
    }
}

/// The Slurm of the env file at `path`.
fn from_file(path: &str) -> Env {
    let vars = conformance::harness::slurm_env_vars(path);
    let get = |k: &str| {
        vars.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{path} has no {k}; re-run `scripts/slurm/up`"))
    };
    Env {
        url: get("SLURM_REST_URL"),
        user: get("SLURM_USER"),
        token_file: PathBuf::from(get("SLURM_TOKEN_FILE")),
        output_dir: PathBuf::from(get("SLURM_OUTPUT_DIR")),
        partition: get("SLURM_PARTITION"),
        urgent_partition: get("SLURM_URGENT_PARTITION"),
        slurm_conf: get("SLURM_CONF"),
        container: vars
            .get("SLURM_CONTAINER")
            .filter(|c| !c.is_empty())
            .cloned(),
        expect_dialect: expected_dialect(vars.get("SLURM_EXPECT_DIALECT").cloned()),
        version: vars.get("SLURM_VERSION").cloned(),
        memory_limits: vars
            .get("SLURM_MEMORY_LIMITS")
            .is_some_and(|v| v == "cgroup"),
    }
}

/// The dialect `auto` must pick (`SLURM_EXPECT_DIALECT`), if named.
pub(super) fn expected_dialect(named: Option<String>) -> Option<Dialect> {
    named.filter(|d| !d.is_empty()).map(|d| {
        serde_json::from_value(Value::String(d.clone()))
            .unwrap_or_else(|e| panic!("SLURM_EXPECT_DIALECT {d}: {e}"))
    })
}
