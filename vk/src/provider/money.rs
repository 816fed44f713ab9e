//! What a workload costs and what a provider has free: prices, quotes, inventory.

use super::*;

/// An hourly price in millionths of a dollar (exact, comparable, `Eq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Price(pub u64);

impl Price {
    /// From dollars per hour; `None` for a negative or non-finite figure.
    pub fn from_dollars(d: f64) -> Option<Self> {
        (d.is_finite() && d >= 0.0).then(|| Self((d * 1e6).round() as u64))
    }
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// This price for `n` units (GPUs).
    pub fn times(self, n: u32) -> Self {
        Self(self.0.saturating_mul(u64::from(n)))
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.2}/h", self.dollars())
    }
}

impl std::ops::Add for Price {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self(self.0.saturating_add(o.0))
    }
}

impl std::iter::Sum for Price {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self(0), |a, b| a + b)
    }
}

/// What a provider offers now for one GPU type (or for CPU-only work when `gpu_type` is
/// `None`): its list price and how much of it is free, from the provider's own catalogue
/// (RunPod `GET /v2/catalog/gpus`, Vast's offer search) or from configuration (Slurm).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Quote {
    /// Normalised GPU type (as pods name it, e.g. `RTX4090`); `None`: any type / CPU-only.
    pub gpu_type: Option<String>,
    /// Price of one GPU (of a CPU-only workload when `gpu_type` is `None`) for an hour.
    pub price_per_gpu: Price,
    /// GPUs of this type free now, where the provider tells; `None`: unknown.
    pub available_gpus: Option<u32>,
    /// Largest count one workload may ask for, where the provider tells.
    pub max_per_workload: Option<u32>,
}

/// A provider's offers at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub quotes: Vec<Quote>,
}

impl Inventory {
    /// The quote for a GPU type (case-insensitive), or the provider's catch-all quote.
    pub fn quote(&self, gpu_type: Option<&str>) -> Option<&Quote> {
        let exact = gpu_type.and_then(|t| {
            self.quotes.iter().find(|q| {
                q.gpu_type
                    .as_deref()
                    .is_some_and(|qt| qt.eq_ignore_ascii_case(t))
            })
        });
        exact.or_else(|| match gpu_type {
            // "Any GPU": the cheapest type that has room.
            None => self
                .quotes
                .iter()
                .filter(|q| q.available_gpus != Some(0))
                .min_by_key(|q| q.price_per_gpu),
            Some(_) => self.quotes.iter().find(|q| q.gpu_type.is_none()),
        })
    }

    /// The inventory of a provider that publishes no prices (Slurm, another cluster): one
    /// configured price for any GPU type, free capacity unknown (the scheduler there queues
    /// what does not fit); empty without a configured price.
    pub fn configured(price_per_gpu_hour: Option<f64>, max_per_workload: u32) -> Self {
        let Some(price) = price_per_gpu_hour.and_then(Price::from_dollars) else {
            return Self::default();
        };
        Self {
            quotes: vec![Quote {
                gpu_type: None,
                price_per_gpu: price,
                available_gpus: None,
                max_per_workload: Some(max_per_workload),
            }],
        }
    }

    /// GPUs free across every type, where the provider tells for each.
    pub fn available_gpus(&self) -> Option<u64> {
        self.quotes
            .iter()
            .filter(|q| q.gpu_type.is_some())
            .map(|q| q.available_gpus.map(u64::from))
            .sum()
    }
}
