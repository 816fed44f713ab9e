//! What to rent for one workload: the offer search, the rent request and the price bounds,
//! resolved from the workload, its pod options and the configuration.

use super::Vast;
use super::limits;
use super::wire::{CreateInstanceRequest, Filter, ImageLogin, OfferSearch};
use crate::provider::{ProviderError, Workload};
use crate::providers::options::Options;
use crate::providers::rest;

/// What to rent for one workload, resolved from the workload and the configuration.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) search: OfferSearch,
    pub(super) request: CreateInstanceRequest,
    /// `Some` for an interruptible rent: the explicit bid, if the pod gave one.
    pub(super) bid: Option<Option<f64>>,
    pub(super) max_price: Option<f64>,
}

impl Vast {
    /// Resolves the search and the rent request; pure, checked before any network call.
    pub(super) fn plan(&self, w: &Workload) -> Result<Plan, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid { message };
        let gpu = w.gpu.as_ref().filter(|g| g.count > 0).ok_or_else(|| {
            invalid("Vast runs GPU workloads only: the pod requests no GPU".to_owned())
        })?;
        if gpu.count > self.cfg.max_gpus_per_workload {
            return Err(invalid(format!(
                "the pod requests {} GPUs, more than the {} allowed on {}",
                gpu.count, self.cfg.max_gpus_per_workload, self.name
            )));
        }
        // Vast matches names exactly: the neutral type goes through the mapping (see `gpus`).
        let gpu_match = gpu
            .gpu_type
            .as_ref()
            .or(self.cfg.default_gpu_type.as_ref())
            .map(|t| super::gpus::resolve(&self.cfg.gpu_names, t));
        let options = Options::of(w);
        let prices = self.prices(&options)?;
        let disk = options.disk_gb(self.cfg.disk_gb, self.cfg.max_disk_gb.map(f64::from))?;
        let geolocation = geolocation(&options);

        let search = OfferSearch {
            verified: self.cfg.verified_only.then_some(Filter::eq(true)),
            rentable: Filter::eq(true),
            rented: Filter::eq(false),
            external: Filter::eq(false),
            gpu_ram: gpu_match
                .as_ref()
                .and_then(|m| m.min_gpu_ram_mb)
                .map(Filter::gte),
            gpu_name: gpu_match.map(|m| Filter::one_of(m.names)),
            num_gpus: Filter::eq(gpu.count),
            dph_total: prices.max_price.map(Filter::lte),
            disk_space: Filter::gte(disk),
            cuda_max_good: options
                .text("min_cuda")
                .and_then(|v| v.parse::<f64>().ok())
                .map(Filter::gte),
            geolocation: geolocation.map(Filter::one_of),
            reliability: (self.cfg.min_reliability > 0.0)
                .then_some(Filter::gte(self.cfg.min_reliability)),
            direct_port_count: u32::try_from(w.ports.len())
                .ok()
                .filter(|&n| n > 0)
                .map(Filter::gte),
            kind: if prices.interruptible {
                "bid"
            } else {
                "ondemand"
            },
            order: vec![["dph_total".to_owned(), "asc".to_owned()]],
            limit: self.cfg.search_limit,
            allocated_storage: disk,
        };
        let bid = prices.bid_price.filter(|_| prices.interruptible);
        let request = rent_request(w, disk, bid)?;
        Ok(Plan {
            search,
            request,
            bid: prices.interruptible.then_some(prices.bid_price),
            max_price: prices.max_price,
        })
    }

    /// The rent's kind and price bounds: the pod's options, within the configured ones.
    fn prices(&self, options: &Options<'_>) -> Result<Prices, ProviderError> {
        let interruptible = options
            .bool("interruptible")?
            .unwrap_or(self.cfg.interruptible);
        // The operator's maxPricePerHour is a ceiling: a pod may lower it, never raise it.
        let bid_price = options.positive_at_most("bid_price", self.cfg.max_price_per_hour)?;
        let max_price = options
            .positive_at_most("max_price_per_hour", self.cfg.max_price_per_hour)?
            .or(self.cfg.max_price_per_hour);
        if let (Some(bid), Some(max)) = (bid_price, max_price)
            && interruptible
            && bid > max
        {
            return Err(ProviderError::Invalid {
                message: format!("bid_price {bid} is above the maximum of {max} $/h"),
            });
        }
        Ok(Prices {
            interruptible,
            bid_price,
            max_price,
        })
    }
}

/// How one workload is rented and at what price.
struct Prices {
    /// A bid (interruptible) rather than on demand.
    interruptible: bool,
    /// The pod's bid, if it gave one.
    bid_price: Option<f64>,
    /// The highest price per hour an offer may have.
    max_price: Option<f64>,
}

/// The rent request for `w` (its price set per offer later), within Vast's input limits; `bid`
/// is the pod's bid of an interruptible rent.
fn rent_request(
    w: &Workload,
    disk: f64,
    bid: Option<f64>,
) -> Result<CreateInstanceRequest, ProviderError> {
    let invalid = |message: String| ProviderError::Invalid { message };
    // Vast reads every key of `env` as a `docker run` option: only variable names may be
    // keys besides the port mappings added here (`-v /:/host` would mount the host).
    if let Some(bad) = w
        .env
        .iter()
        .find(|e| !crate::provider::is_env_name(&e.name))
    {
        return Err(invalid(format!(
            "env name {:?} is not a variable name: Vast would read it as a docker option",
            bad.name.chars().take(64).collect::<String>()
        )));
    }
    let mut env = rest::env_map(&w.env);
    for port in &w.ports {
        env.insert(format!("-p {port}:{port}"), "1".to_owned());
    }
    let (onstart, args) = entrypoint_and_args(&w.command, &w.args);
    limits::check(
        &w.image,
        w.id.as_str(),
        onstart.as_deref(),
        &args,
        &env,
        disk,
        bid,
    )
    .map_err(invalid)?;
    Ok(CreateInstanceRequest {
        image: w.image.clone(),
        label: w.id.as_str().to_owned(),
        disk,
        runtype: "args",
        target_state: "running",
        onstart,
        args: (!args.is_empty()).then_some(args),
        env,
        price: None,
        cancel_unavail: true,
        image_login: w.login_for(&w.image).map(image_login),
    })
}

/// `image_login`: "Docker registry credentials for private images (eg., `-u username -p
/// access_token docker.io`)" (vast-ai/docs `api-reference/creating-instances-with-api.mdx`),
/// `docker login` arguments; a word with anything but letters, digits and `._@:/+=-` is quoted
/// as a shell reads it, so a password with spaces or quotes arrives whole.
fn image_login(l: &crate::provider::RegistryLogin) -> ImageLogin {
    let quote = |w: &str| {
        if !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._@:/+=-".contains(c))
        {
            w.to_owned()
        } else {
            crate::vocab::shell::quote(w)
        }
    };
    let registry = if l.registry == crate::vocab::image::DOCKER_HUB {
        "docker.io"
    } else {
        &l.registry
    };
    ImageLogin(format!(
        "-u {} -p {} {}",
        quote(&l.username),
        quote(&l.password),
        quote(registry)
    ))
}

/// The pod's `region` (or `geolocation`) option: Vast's country codes, upper-cased.
fn geolocation(options: &Options<'_>) -> Option<Vec<String>> {
    options
        .list(&["region", "geolocation"])
        .map(|v| {
            v.into_iter()
                .map(|s| s.to_ascii_uppercase())
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty())
}

/// Kubernetes `command` and `args` as Vast's `args` runtype takes them.
///
/// Kubernetes: `command` replaces the image ENTRYPOINT (and drops its CMD), `args` replaces
/// the CMD. Vast, runtype `args`: the container is created "from your image as is"; the
/// entrypoint can be overridden and `args` are passed to the entrypoint (vast-ai/vast-cli
/// `vast.py`, `create instance` help; its `--entrypoint` is sent as `onstart`, which in the
/// `args` runtype is the entrypoint: "override the entrypoint to bash ... --onstart-cmd 'bash'
/// --args -c '...'"). Docker takes one word as the entrypoint, so `command[0]` becomes
/// `onstart` and the rest of `command`, then `args`, become `args`: the process runs
/// `command[0] command[1..] args[..]`, exactly what Kubernetes runs. Without a `command`, the
/// image ENTRYPOINT is kept and `args` (if any) replace its CMD.
pub(super) fn entrypoint_and_args(
    command: &[String],
    args: &[String],
) -> (Option<String>, Vec<String>) {
    match command.split_first() {
        Some((entry, rest)) => (
            Some(entry.clone()),
            rest.iter().chain(args).cloned().collect(),
        ),
        None => (None, args.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn command_replaces_the_entrypoint_and_args_the_cmd() {
        assert_eq!(
            entrypoint_and_args(&v(&["python", "-u", "x.py"]), &v(&["--n", "1"])),
            (Some("python".into()), v(&["-u", "x.py", "--n", "1"]))
        );
        assert_eq!(
            entrypoint_and_args(&[], &v(&["serve"])),
            (None, v(&["serve"]))
        );
        assert_eq!(
            entrypoint_and_args(&v(&["sleep"]), &[]),
            (Some("sleep".into()), vec![])
        );
        assert_eq!(entrypoint_and_args(&[], &[]), (None, vec![]));
    }

    #[test]
    fn an_image_login_is_docker_login_arguments_that_never_show_in_debug() {
        use crate::provider::RegistryLogin;
        let login = |registry: &str, password: &str| RegistryLogin {
            registry: registry.into(),
            username: "robot".into(),
            password: password.into(),
        };
        let plain = image_login(&login("registry.example.com:5000", "tok-1"));
        assert_eq!(plain.0, "-u robot -p tok-1 registry.example.com:5000");
        let odd = image_login(&login("index.docker.io", "it's a secret"));
        assert_eq!(odd.0, r"-u robot -p 'it'\''s a secret' docker.io");
        assert!(!format!("{odd:?}").contains("secret"));
    }
}
