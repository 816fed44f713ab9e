//! The real Slurm of `make slurm-up`: found through its env file, observed and cleaned up
//! through slurmrestd.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

#[allow(unused_imports)]
use super::*;

/// A real single-node Slurm of `make slurm-up` (`scripts/slurm/up`: the host's 22.05, or with
/// `--suite trixie|sid` 24.11 or 26.05 in a container), found through the env file named by
/// `SLURM_ENV_FILE`, observed and cleaned up through slurmrestd in the dialect that release
/// serves (`SLURM_EXPECT_DIALECT`, measured per release) with the same JWT the VK uses.
#[derive(Clone, Debug)]
pub struct RealSlurm {
    pub url: String,
    /// The slurmrestd dialect the suite speaks itself (`v0.0.38` on 22.05, `v0.0.42` on
    /// 24.11, `v0.0.45` on 26.05); the VK detects its own from `/openapi/v3`.
    pub dialect: String,
    /// The container Slurm runs in (`SLURM_CONTAINER`): the command-line tools run there.
    pub container: Option<String>,
    /// `SLURM_VERSION`, when the env file names it.
    pub version: Option<String>,
    pub user: String,
    pub token_file: PathBuf,
    pub output_dir: PathBuf,
    pub partition: String,
    /// `SLURM_CONF` for the command-line tools (`squeue`, `scancel`).
    pub slurm_conf: Option<String>,
    http: reqwest::Client,
}

impl RealSlurm {
    /// Reads `SLURM_ENV_FILE`; fails loudly (never skips) when there is no Slurm to use.
    pub fn from_env() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let path = std::env::var("SLURM_ENV_FILE").unwrap_or_else(|_| {
            panic!(
                "SLURM_ENV_FILE is not set: this test needs the real Slurm. Run `make slurm-up` \
                 (it writes ${{VK_CACHE:-$HOME/.cache/gpu-vk}}/slurm/env) and set SLURM_ENV_FILE \
                 to that file, or run `make test`, which does both"
            )
        });
        let vars = slurm_env_vars(&path);
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{path} has no {k}; run `make slurm-up` again"))
        };
        Self {
            url: get("SLURM_REST_URL").trim_end_matches('/').to_owned(),
            dialect: vars
                .get("SLURM_EXPECT_DIALECT")
                .filter(|d| !d.is_empty())
                .cloned()
                .unwrap_or_else(|| "v0.0.38".into()),
            container: vars
                .get("SLURM_CONTAINER")
                .filter(|c| !c.is_empty())
                .cloned(),
            version: vars.get("SLURM_VERSION").filter(|v| !v.is_empty()).cloned(),
            user: get("SLURM_USER"),
            token_file: PathBuf::from(get("SLURM_TOKEN_FILE")),
            output_dir: PathBuf::from(get("SLURM_OUTPUT_DIR")),
            partition: vars
                .get("SLURM_PARTITION")
                .cloned()
                .unwrap_or_else(|| "debug".into()),
            slurm_conf: vars.get("SLURM_CONF").cloned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
        }
    }

    /// This Slurm as one entry of the VK's `providers:` list: no dialect (the adapter detects
    /// it from `/openapi/v3`, as a user's config would leave it), the token file (re-read by
    /// the adapter when `up` mints a new one), commands run bare (no container runtime on the
    /// test node), logs from the shared output directory, and a time limit so a job a failed
    /// test leaves behind ends on its own.
    pub fn provider_yaml(&self, name: &str) -> String {
        format!(
            "- name: {name}\n  kind: slurm\n  secretEnv: allow\n  sharedSlurmUser: true\n  settings:\n    baseUrl: {url}\n    \
             userName: {user}\n    tokenFile: {token}\n    partition: {partition}\n    runtime: bare\n    \
             outputDir: {out}\n    defaultTimeLimitMinutes: 10\n    requestTimeoutSecs: 20\n",
            url = yaml_str(&self.url),
            user = yaml_str(&self.user),
            token = yaml_str(&self.token_file.to_string_lossy()),
            partition = yaml_str(&self.partition),
            out = yaml_str(&self.output_dir.to_string_lossy()),
        )
    }

    /// [`Self::provider_yaml`] with `kubectl exec` on (`exec: srun`): srun finds the cluster
    /// through `slurmConf`; when the tests run as root, srun runs as the jobs' user (Slurm lets
    /// only a job's owner add steps to it).
    pub fn provider_yaml_with_exec(&self, name: &str) -> String {
        let mut yaml = self.provider_yaml(name);
        yaml.push_str("    exec: srun\n");
        if let Some(conf) = &self.slurm_conf {
            yaml.push_str(&format!("    slurmConf: {}\n", json!(conf)));
        }
        if rustix::process::getuid().is_root() {
            yaml.push_str(&format!(
                "    execWrapper: [runuser, -u, {}, --]\n",
                json!(self.user)
            ));
        }
        yaml
    }

    fn token(&self) -> String {
        let raw = std::fs::read_to_string(&self.token_file).unwrap_or_else(|e| {
            panic!(
                "cannot read the Slurm token {}: {e}; run `make slurm-up`",
                self.token_file.display()
            )
        });
        let t = raw.trim();
        t.strip_prefix("SLURM_JWT=").unwrap_or(t).to_owned()
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}/slurm/{}{path}", self.url, self.dialect))
            .header("X-SLURM-USER-NAME", &self.user)
            .header("X-SLURM-USER-TOKEN", self.token())
    }

    /// slurmrestd's raw job records (`GET /slurm/<dialect>/jobs`).
    pub async fn jobs(&self) -> Vec<Value> {
        let r = self
            .request(reqwest::Method::GET, "/jobs")
            .send()
            .await
            .unwrap_or_else(|e| panic!("slurmrestd at {} unreachable: {e}", self.url));
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "slurmrestd GET /jobs answered {status}: {body}; is `make slurm-up` healthy?"
        );
        body["jobs"].as_array().cloned().unwrap_or_default()
    }

    /// Every job, in the observers' shape: `{id, name, state, reason, exit_code, user,
    /// comment, nodes, address}` (`state` is Slurm's `job_state`, `address` its node's).
    pub async fn workloads(&self) -> Vec<Value> {
        let addresses = self.node_addresses().await;
        self.jobs()
            .await
            .iter()
            .map(|j| {
                // The first node of the job's hostlist (the suite's Slurms have one node).
                let node = j["nodes"].as_str().unwrap_or_default();
                json!({
                    "address": addresses.get(node),
                    "id": j["job_id"].as_u64().map(|n| n.to_string()).unwrap_or_default(),
                    "name": j["name"],
                    "state": job_state(j),
                    "reason": j["state_reason"],
                    "exit_code": j["exit_code"],
                    "user": j["user_name"],
                    "comment": j["comment"],
                    "nodes": j["nodes"],
                })
            })
            .collect()
    }

    /// slurmrestd's node records: node name -> `address` (its NodeAddr).
    pub async fn node_addresses(&self) -> std::collections::BTreeMap<String, String> {
        let r = self.request(reqwest::Method::GET, "/nodes/").send().await;
        let body: Value = match r {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => panic!("slurmrestd at {} unreachable: {e}", self.url),
        };
        body["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some((
                    n["name"].as_str()?.to_owned(),
                    n["address"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }

    /// Submits a batch job named `name` running `script` (no GPU, 10-minute limit, output
    /// discarded), as someone other than the VK would; returns its job id.
    pub async fn submit(&self, name: &str, script: &str) -> String {
        let body = submit_body(&self.dialect, name, script, &self.partition);
        let r = self
            .request(reqwest::Method::POST, "/job/submit")
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("slurmrestd at {} unreachable: {e}", self.url));
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        let id = v["job_id"].as_u64().filter(|_| status.is_success());
        id.unwrap_or_else(|| panic!("job submission refused ({status}): {v}"))
            .to_string()
    }

    /// Cancels a job (`DELETE /slurm/<dialect>/job/{id}`); a finished or unknown one is fine.
    pub async fn cancel(&self, job_id: &str) {
        let _ = self
            .request(reqwest::Method::DELETE, &format!("/job/{job_id}"))
            .send()
            .await;
    }

    /// Cancels every live job whose name starts with `prefix` and waits (up to a minute) until
    /// none is pending, running or completing.
    pub async fn cancel_owned(&self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live: Vec<Value> = self
                .workloads()
                .await
                .into_iter()
                .filter(|w| !is_terminated(w))
                .filter(|w| w["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .collect();
            if live.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                eprintln!("jobs of {prefix} still live after clean-up: {live:?}");
                return;
            }
            for w in &live {
                if w["state"] != "COMPLETING"
                    && let Some(id) = w["id"].as_str()
                {
                    self.cancel(id).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `squeue`'s view (pending, running and completing jobs of every user): `(job id, name,
    /// state)`.
    pub fn squeue(&self) -> Vec<(String, String, String)> {
        let cmd = self.command("squeue", &["-h", "-a", "-o", "%i|%j|%T"]);
        pod::run(cmd, "squeue")
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(3, '|');
                Some((
                    p.next()?.trim().to_owned(),
                    p.next()?.trim().to_owned(),
                    p.next()?.trim().to_owned(),
                ))
            })
            .collect()
    }
}

impl RealSlurm {
    /// A Slurm command-line tool with `args`, on the host (with `SLURM_CONF`) or, when this
    /// Slurm runs in a container, inside it (`docker exec`).
    pub fn command(&self, tool: &str, args: &[&str]) -> std::process::Command {
        let mut cmd = match &self.container {
            Some(c) => {
                let mut cmd = std::process::Command::new("docker");
                cmd.arg("exec");
                if let Some(conf) = &self.slurm_conf {
                    cmd.args(["-e", &format!("SLURM_CONF={conf}")]);
                }
                cmd.args([c.as_str(), tool]);
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new(tool);
                if let Some(conf) = &self.slurm_conf {
                    cmd.env("SLURM_CONF", conf);
                }
                cmd
            }
        };
        cmd.args(args);
        cmd
    }
}

/// A job submission from outside any VK in `dialect`: v0.0.38 takes the script beside `job`,
/// environment as an object and plain numbers; v0.0.41 and later (`v0.0.4x_job_desc_msg`)
/// take the script inside `job`, environment as `["K=V"]` and unset-able numbers as
/// `{set, infinite, number}`.
pub fn submit_body(dialect: &str, name: &str, script: &str, partition: &str) -> Value {
    let script = format!("#!/bin/bash\n{script}\n");
    let mut job = json!({
        "name": name,
        "comment": "created by the conformance suite, outside any virtual kubelet",
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "partition": partition,
    });
    if dialect == "v0.0.38" {
        job["environment"] = json!({"PATH": "/usr/local/bin:/usr/bin:/bin"});
        job["time_limit"] = json!(10);
        json!({"script": script, "job": job})
    } else {
        job["environment"] = json!(["PATH=/usr/local/bin:/usr/bin:/bin"]);
        job["time_limit"] = json!({"set": true, "infinite": false, "number": 10});
        job["script"] = json!(script);
        json!({"job": job})
    }
}

/// A v0.0.38 `job_state` (a string; v0.0.41 lists base state and flags, the last flag wins).
pub(crate) fn job_state(j: &Value) -> Value {
    match &j["job_state"] {
        Value::Array(a) => a.last().cloned().unwrap_or(Value::Null),
        other => other.clone(),
    }
}

pub struct JobsGuard {
    pub slurm: RealSlurm,
    /// Job names starting with this are this VK's (see [`Vk::owner_prefix`]).
    pub prefix: String,
}

impl Drop for JobsGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let ids: Vec<String> = self
            .slurm
            .squeue()
            .into_iter()
            .filter(|(_, name, _)| name.starts_with(&self.prefix))
            .map(|(id, _, _)| id)
            .collect();
        if ids.is_empty() {
            return;
        }
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let _ = self.slurm.command("scancel", &ids).status();
    }
}

/// The variables of a Slurm env file (`export K=V` lines, as `scripts/slurm/up` and
/// `scripts/slurm/container-up` write them); fails loudly when it cannot be read.
pub fn slurm_env_vars(path: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("cannot read SLURM_ENV_FILE {path}: {e}; run `make slurm-up` first")
    });
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
        .collect()
}
