//! `kubectl gpu-vk`: where pods offloaded by gpu-vk run, why there, and what they cost, read
//! with the user's kubeconfig and RBAC (no endpoint but the API server, nothing written).
//!
//! Exit codes, for scripts: 0 done; 1 the cluster could not be read; 2 usage (clap's); 3 the
//! pod asked about does not exist; 4 (`why`) the pod is held (Pending for a reason of the
//! virtual kubelet's) or Failed.

mod cluster;
mod model;
mod render;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use jiff::{Timestamp, Zoned};

use cluster::Scope;
use render::Output;

#[derive(Parser)]
#[command(name = "kubectl-gpu_vk", bin_name = "kubectl gpu-vk", version, about)]
struct Cli {
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table", global = true)]
    output: Output,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
    /// The clock to compute costs at (RFC 3339; default: now). For reproducible reports.
    #[arg(long, global = true, hide = true)]
    now: Option<Timestamp>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Each provider of each virtual node: health (its node condition), live pods, GPUs and
    /// spend per hour.
    Providers,
    /// Pods on the virtual nodes: provider, status, price, cost so far and why it was chosen.
    Pods {
        #[command(flatten)]
        ns: Namespaces,
    },
    /// Why a pod is where it is: its status reason and message (for a held pod, every provider
    /// considered and why not), the dispatch decision and its Events.
    Why {
        pod: String,
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Live spend per namespace: per hour now, and what live pods accrued this period.
    Spend {
        #[command(flatten)]
        ns: Namespaces,
        #[arg(long, value_enum, default_value = "month")]
        period: Period,
        /// The time zone periods start in (IANA name).
        #[arg(long, default_value = "UTC")]
        tz: String,
    },
    /// Prints a shell completion script (bash, zsh, fish, powershell, elvish).
    Completion { shell: clap_complete::Shell },
}

#[derive(clap::Args)]
struct Namespaces {
    /// The namespace (default: the kubeconfig's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Period {
    Day,
    Week,
    Month,
}

/// The start of the `period` that holds `now`, in time zone `tz`.
fn period_start(now: Timestamp, period: Period, tz: &str) -> anyhow::Result<Timestamp> {
    let z: Zoned = now.in_tz(tz)?;
    let day = z.start_of_day()?;
    let start = match period {
        Period::Day => day,
        Period::Week => {
            let back = i64::from(day.weekday().to_monday_zero_offset());
            day.checked_sub(jiff::Span::new().days(back))?
        }
        Period::Month => day.first_of_month()?,
    };
    Ok(start.timestamp())
}

async fn client(context: Option<String>) -> anyhow::Result<kube::Client> {
    let opts = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let cfg = match kube::Config::from_kubeconfig(&opts).await {
        Ok(c) => c,
        Err(_) if opts.context.is_none() => kube::Config::infer().await?,
        Err(e) => return Err(e.into()),
    };
    Ok(kube::Client::try_from(cfg)?)
}

fn scope(ns: &Namespaces, client: &kube::Client) -> Scope {
    match (&ns.namespace, ns.all_namespaces) {
        (_, true) => Scope::All,
        (Some(n), false) => Scope::Namespace(n.clone()),
        (None, false) => Scope::Namespace(client.default_namespace().to_owned()),
    }
}

/// Runs one command: what to print, and the exit code.
async fn run(cli: Cli) -> anyhow::Result<(String, u8)> {
    let now = cli.now.unwrap_or_else(Timestamp::now);
    match cli.command {
        Command::Completion { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-gpu_vk", &mut buf);
            Ok((String::from_utf8(buf)?, 0))
        }
        command => {
            let client = client(cli.context).await?;
            read(command, &client, now, cli.output).await
        }
    }
}

/// `rows` in the `output` format, `table` when that is a table.
fn shown(rows: &dyn erased::Rows, output: Output, table: String) -> anyhow::Result<String> {
    rows.structured(output).unwrap_or(Ok(table))
}

/// A command that reads the cluster.
async fn read(
    command: Command,
    client: &kube::Client,
    now: Timestamp,
    output: Output,
) -> anyhow::Result<(String, u8)> {
    let snapshot = |scope: Scope| async move {
        let mut snap = cluster::snapshot(client, &scope).await?;
        snap.now = Some(now);
        anyhow::Ok(snap)
    };
    match command {
        Command::Providers => {
            let rows = model::providers(&snapshot(Scope::All).await?);
            Ok((shown(&rows, output, render::providers(&rows))?, 0))
        }
        Command::Pods { ns } => {
            let rows = model::pods(&snapshot(scope(&ns, client)).await?);
            Ok((shown(&rows, output, render::pods(&rows))?, 0))
        }
        Command::Spend { ns, period, tz } => {
            let start = period_start(now, period, &tz)?;
            let rows = model::spend(&snapshot(scope(&ns, client)).await?, start);
            let name = format!("{period:?}").to_lowercase();
            Ok((shown(&rows, output, render::spend(&rows, &name))?, 0))
        }
        Command::Why { pod, namespace } => {
            let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
            let Some((p, events)) = cluster::pod_and_events(client, &ns, &pod).await? else {
                let msg = format!(
                    "pod {ns}/{pod} does not exist (a pod refused at admission never does: its \
                     controller's FailedCreate Event says why)\n"
                );
                return Ok((msg, 3));
            };
            let w = model::why(&p, &events, now);
            let code = if w.held { 4 } else { 0 };
            Ok((shown(&w, output, render::why(&w))?, code))
        }
        // Answered by `run` before a client is built.
        Command::Completion { .. } => Ok((String::new(), 2)),
    }
}

/// Rows of any command, printed as JSON or YAML.
mod erased {
    pub trait Rows {
        fn structured(&self, output: crate::Output) -> Option<anyhow::Result<String>>;
    }
    impl<T: serde::Serialize> Rows for T {
        fn structured(&self, output: crate::Output) -> Option<anyhow::Result<String>> {
            crate::render::structured(self, output)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cli)) {
        Ok((text, code)) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
