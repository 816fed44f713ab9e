//! The `vk` binary: runs the virtual kubelet (`vk run --config FILE`) or checks a config file.

#[path = "main/companion.rs"]
mod companion;
#[path = "main/namespaces.rs"]
mod namespaces;
#[path = "main/tasks.rs"]
mod tasks;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tracing::info;

use tasks::Tasks;
use vk::config::Config;
use vk::leader::{Elector, PodRef, Term};
use vk::naming::Owner;
use vk::node::NodeManager;
use vk::pods::PodController;
use vk::telemetry::{self, Metrics};

#[derive(Parser)]
#[command(name = "vk", version, about = "GPU-offload virtual kubelet")]
struct Cli {
    /// Log as JSON lines.
    #[arg(long, global = true, env = "VK_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the virtual kubelet.
    Run {
        #[arg(long, env = "VK_CONFIG")]
        config: PathBuf,
        /// Overrides the config's `internalIp` (in a pod: the pod IP from the downward API).
        #[arg(long, env = "VK_INTERNAL_IP")]
        internal_ip: Option<String>,
        /// `NAMESPACE/NAME` of a Service in front of this VK's kubelet port: its ClusterIP is
        /// advertised as the node's address (stable when Kubernetes replaces the VK pod, so no
        /// pod's hostIP changes), and the kubelet API binds `internalIp` (the pod IP) instead.
        #[arg(long, env = "VK_ADDRESS_SERVICE", value_name = "NAMESPACE/NAME")]
        address_service: Option<String>,
        /// Overrides the config's `metricsAddr` (replicas sharing one config on one host).
        #[arg(long, env = "VK_METRICS_ADDR")]
        metrics_addr: Option<String>,
        /// Overrides the config's `kubeletPort`.
        #[arg(long, env = "VK_KUBELET_PORT")]
        kubelet_port: Option<u16>,
        /// This replica's name in leader election (default: `VK_POD_NAME`, else host name and
        /// process id).
        #[arg(long, env = "VK_IDENTITY")]
        identity: Option<String>,
        /// The pod this replica runs in (downward API), labelled `gpu-vk.io/leader=true` while
        /// it leads.
        #[arg(long, env = "VK_POD_NAME")]
        pod_name: Option<String>,
        #[arg(long, env = "VK_POD_NAMESPACE")]
        pod_namespace: Option<String>,
    },
    /// The overflow companion: the admission webhook that lets opted-in pods overflow to the
    /// virtual node, and the controller that moves them back in-cluster (`vk::overflow`).
    Overflow {
        /// Where the webhook listens (HTTPS, self-signed for the Service below).
        #[arg(long, env = "VK_OVERFLOW_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
        webhook_addr: SocketAddr,
        /// `NAMESPACE/NAME` of the webhook's Service: the certificate's DNS names.
        #[arg(long, env = "VK_OVERFLOW_SERVICE", value_name = "NAMESPACE/NAME")]
        service: String,
        /// The webhook's serving certificate (PEM chain), with `--tls-key-file`: re-read when
        /// it changes; the API server trusts its CA through the webhook configuration's
        /// `caBundle`, written by whoever made it (the Helm chart does), so this process needs
        /// no right on that configuration.
        #[arg(long, env = "VK_OVERFLOW_TLS_CERT_FILE", requires = "tls_key_file")]
        tls_cert_file: Option<PathBuf>,
        #[arg(long, env = "VK_OVERFLOW_TLS_KEY_FILE", requires = "tls_cert_file")]
        tls_key_file: Option<PathBuf>,
        /// Without certificate files: the MutatingWebhookConfiguration whose `caBundle` gets a
        /// self-signed certificate made at start (needs `get` and `update` on it).
        #[arg(
            long,
            env = "VK_OVERFLOW_WEBHOOK_CONFIG",
            required_unless_present = "tls_cert_file"
        )]
        webhook_config: Option<String>,
        /// Prometheus `/metrics` and `/healthz`.
        #[arg(long, env = "VK_METRICS_ADDR", default_value = "0.0.0.0:10256")]
        metrics_addr: SocketAddr,
        /// In-cluster GPUs must stay free this long before an offloaded replica moves back.
        #[arg(long, env = "VK_RECLAIM_SETTLE_SECONDS", default_value_t = 60)]
        reclaim_settle_seconds: u64,
        /// How often the reclaim controller looks at nodes and pods.
        #[arg(long, env = "VK_RECLAIM_INTERVAL_SECONDS", default_value_t = 5)]
        reclaim_interval_seconds: u64,
        /// Moves of one ReplicaSet whose replacement went to the virtual node again, after
        /// which its replicas stay there (an Event on the ReplicaSet says so).
        #[arg(long, env = "VK_RECLAIM_MAX_FAILED_MOVES", default_value_t = 3)]
        reclaim_max_failed_moves: u32,
        /// Admission only: never move replicas back.
        #[arg(long, env = "VK_RECLAIM_DISABLED")]
        no_reclaim: bool,
        /// Move back only the replicas of this virtual node (the release's own); every
        /// virtual node's when absent.
        #[arg(long, env = "VK_RECLAIM_VIRTUAL_NODE")]
        virtual_node: Option<String>,
        /// Make-before-break: research pods labelled `gpu-vk.io/handoff=true` wait (gated) up
        /// to this long while production's replicas they displace start on the virtual node
        /// (`--virtual-node`) first; 0 turns it off.
        #[arg(long, env = "VK_HANDOFF_MAX_DELAY_SECONDS", default_value_t = 0)]
        handoff_max_delay_seconds: u64,
        /// Warm standby: while research is active, each opted-in ReplicaSet with replicas
        /// in-cluster keeps up to this many stand-ins running on the virtual node (a pod
        /// template's `overflow.gpu-vk.io/warm-replicas` annotation may ask for fewer).
        #[arg(long, env = "VK_HANDOFF_WARM_REPLICAS", default_value_t = 0)]
        handoff_warm_replicas: u32,
        /// The namespaces whose research pods may take production's GPUs through the hand-off,
        /// comma-separated; a research pod elsewhere schedules as usual. None: no research.
        #[arg(long, env = "VK_HANDOFF_RESEARCH_NAMESPACES", value_delimiter = ',')]
        handoff_research_namespaces: Vec<String>,
        /// PriorityClasses whose GPU pods in those namespaces are research, comma-separated:
        /// gated without the `gpu-vk.io/handoff` label (which other research may still carry).
        #[arg(
            long,
            env = "VK_HANDOFF_RESEARCH_PRIORITY_CLASSES",
            value_delimiter = ','
        )]
        handoff_research_priority_classes: Vec<String>,
        /// Seconds an opted-in container without a `preStop` hook sleeps when its pod is
        /// deleted (a `sleep` hook the webhook adds), so its Service lets go of it first: a
        /// hand-off or reclaim fails no request. 0: no hook added.
        #[arg(long, env = "VK_OVERFLOW_DRAIN_SECONDS", default_value_t = 5)]
        drain_seconds: u32,
    },
    /// Validate a configuration file (and that every provider's credentials can be read);
    /// warns about GPU types a provider cannot map to its own exact names.
    CheckConfig {
        #[arg(long, env = "VK_CONFIG")]
        config: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init_logging(cli.log_json);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match cli.command {
            Command::CheckConfig { config } => check_config(&config).await,
            Command::Overflow {
                webhook_addr,
                service,
                tls_cert_file,
                tls_key_file,
                webhook_config,
                metrics_addr,
                reclaim_settle_seconds,
                reclaim_interval_seconds,
                reclaim_max_failed_moves,
                no_reclaim,
                virtual_node,
                handoff_max_delay_seconds,
                handoff_warm_replicas,
                handoff_research_namespaces,
                handoff_research_priority_classes,
                drain_seconds,
            } => {
                let handoff = companion::handoff_settings(
                    virtual_node.clone(),
                    handoff_max_delay_seconds,
                    handoff_warm_replicas,
                    handoff_research_namespaces,
                    handoff_research_priority_classes,
                );
                let reclaim = (!no_reclaim).then(|| vk::overflow::reclaim::Settings {
                    settle: std::time::Duration::from_secs(reclaim_settle_seconds),
                    interval: std::time::Duration::from_secs(reclaim_interval_seconds.max(1)),
                    virtual_node,
                    max_failed_moves: reclaim_max_failed_moves.max(1),
                });
                let cert = match (tls_cert_file, tls_key_file, webhook_config) {
                    (Some(cert), Some(key), _) => WebhookCert::Files { cert, key },
                    (_, _, Some(config)) => WebhookCert::Publish { config },
                    _ => anyhow::bail!(
                        "give --tls-cert-file and --tls-key-file, or --webhook-config"
                    ),
                };
                companion::overflow(
                    webhook_addr,
                    &service,
                    cert,
                    metrics_addr,
                    reclaim,
                    handoff,
                    drain_seconds,
                )
                .await
            }
            Command::Run {
                config,
                internal_ip,
                address_service,
                metrics_addr,
                kubelet_port,
                identity,
                pod_name,
                pod_namespace,
            } => {
                let pod = pod_name
                    .zip(pod_namespace)
                    .map(|(name, namespace)| PodRef { namespace, name });
                let overrides = Overrides {
                    internal_ip,
                    address_service,
                    metrics_addr,
                    kubelet_port,
                    identity,
                    pod,
                };
                run(config, overrides).await
            }
        }
    })
}

/// `vk check-config`: loads the file, builds every provider and checks its credentials; warnings
/// only for what would still run.
async fn check_config(config: &std::path::Path) -> anyhow::Result<()> {
    let cfg = Config::load(config)?;
    let owner = Owner::new(&cfg.cluster_id, &cfg.node_name);
    let providers = vk::providers::registry::build(&cfg.providers, &owner)?;
    vk::providers::registry::preflight(&cfg.providers, &owner).await?;
    // Warnings only: the exit code stays 0.
    let warnings = vk::providers::registry::gpu_type_warnings(&cfg.providers)
        .into_iter()
        .chain(cfg.shared_slurm_secret_warnings());
    for warning in warnings {
        println!("warning: {warning}");
    }
    println!(
        "config OK: node {} with providers {}",
        cfg.node_name,
        providers
            .iter()
            .map(|p| p.name().to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// What the command line (or the pod's environment) sets over the config file.
struct Overrides {
    internal_ip: Option<String>,
    address_service: Option<String>,
    metrics_addr: Option<String>,
    kubelet_port: Option<u16>,
    identity: Option<String>,
    pod: Option<PodRef>,
}

impl Overrides {
    /// Sets the config's values the command line overrides (all but the address Service,
    /// which needs a client).
    fn apply(&self, cfg: &mut Config) {
        if let Some(ip) = &self.internal_ip {
            cfg.internal_ip = ip.clone();
        }
        if let Some(addr) = &self.metrics_addr {
            cfg.metrics_addr = addr.clone();
        }
        if let Some(port) = self.kubelet_port {
            cfg.kubelet_port = port;
        }
    }
}

async fn run(path: PathBuf, o: Overrides) -> anyhow::Result<()> {
    let mut cfg = Config::load(&path)?;
    o.apply(&mut cfg);
    let owner = Owner::new(&cfg.cluster_id, &cfg.node_name);
    let providers = vk::providers::registry::build(&cfg.providers, &owner)?;
    let client = kube::Client::try_default()
        .await
        .context("failed to build a Kubernetes client")?;
    if let Some(service) = &o.address_service {
        advertise_service(&client, &mut cfg, service).await?;
    }
    let cfg = Arc::new(cfg);
    let metrics = Metrics::new();
    let metrics_addr = metrics_addr(&cfg).await?;

    // With leader election, a replica first clears the leader label its pod may still carry,
    // then serves /healthz and metrics as a standby until it leads.
    let elector = cfg
        .leader_election
        .enabled
        .then(|| elector(&client, &cfg, o.identity, o.pod));
    if let Some(e) = &elector {
        e.clear_label().await;
    }
    tokio::spawn(metrics.clone().serve(metrics_addr));
    let mut term = match elector {
        None => None,
        Some(e) => match lead(e, &cfg.node_name).await {
            Some(t) => Some(t),
            None => return Ok(()),
        },
    };
    metrics.leader.set(1);

    let names = providers.iter().map(|p| p.name().to_owned()).collect();
    let node = Arc::new(NodeManager::new(client.clone(), cfg.clone(), names));
    node.claim()
        .await
        .context("refusing to start: the node name is taken")?;
    let fw = PodController::new(client.clone(), cfg.clone(), providers, metrics.clone());
    {
        let fw = fw.clone();
        node.report_facts(Arc::new(move || vk::node::ProviderFacts {
            health: fw.health(),
            free_gpus: fw.inventory_gpus(),
        }));
    }

    let mut tasks = Tasks::start(&fw, &node, &cfg, &client).await?;
    info!(node = %cfg.node_name, cluster = %cfg.cluster_id, owner = owner.tag(), "virtual kubelet started");
    let failed = tasks.first_failure(lost(term.as_mut())).await;
    tasks.stop(failed).await?;
    if let Some(t) = term {
        t.release().await;
    }
    Ok(())
}

/// Advertises the ClusterIP of `service` as the node's address, and has the kubelet API bind
/// `internalIp` instead.
async fn advertise_service(
    client: &kube::Client,
    cfg: &mut Config,
    service: &str,
) -> anyhow::Result<()> {
    let cluster_ip = vk::node::service_address(client, service)
        .await
        .with_context(|| format!("cannot advertise the address of Service {service}"))?;
    info!(service = %service, address = %cluster_ip, bind = %cfg.internal_ip, "advertising the Service's address");
    cfg.kubelet_bind_ip = Some(std::mem::replace(&mut cfg.internal_ip, cluster_ip));
    Ok(())
}

/// The metrics address, bound once here so that a bad or taken one stops the start (the
/// metrics task binds it again).
async fn metrics_addr(cfg: &Config) -> anyhow::Result<SocketAddr> {
    let metrics_addr: SocketAddr = cfg.metrics_addr.parse().context("invalid metricsAddr")?;
    let metrics_listener = tokio::net::TcpListener::bind(metrics_addr)
        .await
        .with_context(|| format!("failed to bind metrics address {metrics_addr}"))?;
    drop(metrics_listener);
    Ok(metrics_addr)
}

/// This replica's part in the leader election: named `identity`, else by its pod, else by
/// [`default_identity`].
fn elector(
    client: &kube::Client,
    cfg: &Config,
    identity: Option<String>,
    pod: Option<PodRef>,
) -> Elector {
    let identity = identity
        .or_else(|| pod.as_ref().map(|p| p.name.clone()))
        .unwrap_or_else(default_identity);
    Elector::new(
        client.clone(),
        cfg.leader_election.clone(),
        &cfg.node_name,
        identity,
        pod,
    )
}

/// Stands by until this replica leads node `node`; `None` when a signal comes first.
async fn lead(e: Elector, node: &str) -> Option<Term> {
    info!(node = %node, me = e.identity(), "leader election: waiting to lead");
    match e.acquire(shutdown_signal()).await {
        Some(t) => Some(t),
        None => {
            info!("signal received while standing by, shutting down");
            None
        }
    }
}

/// Resolves when this replica's leader term ends; never without leader election.
async fn lost(term: Option<&mut Term>) {
    match term {
        Some(t) => t.lost().await,
        None => std::future::pending().await,
    }
}

/// Where the overflow webhook's certificate comes from.
enum WebhookCert {
    /// Files someone else made and the webhook configuration already trusts (the chart's CA).
    Files { cert: PathBuf, key: PathBuf },
    /// Made at start, self-signed, and published into this webhook configuration's caBundle.
    Publish { config: String },
}

/// A replica's identity outside a pod: host name and process id.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "vk".into());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
