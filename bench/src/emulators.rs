//! The provider emulators of one round, and what they counted.

use super::*;

/// The emulators' addresses of one round.
pub(crate) struct Emulators {
    pub(crate) runpod: String,
    pub(crate) vast: String,
    pub(crate) http: reqwest::Client,
}

impl Emulators {
    pub(crate) fn all(&self) -> [(&'static str, &str); 2] {
        [("runpod", &self.runpod), ("vast", &self.vast)]
    }

    pub(crate) async fn counters(&self) -> anyhow::Result<BTreeMap<String, BTreeMap<String, f64>>> {
        let mut out = BTreeMap::new();
        for (name, addr) in self.all() {
            let v: BTreeMap<String, f64> = self
                .http
                .get(format!("http://{addr}/_admin/counters"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            out.insert(name.to_owned(), v);
        }
        Ok(out)
    }

    pub(crate) async fn workloads(&self) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        for (_, addr) in self.all() {
            let v: Vec<Value> = self
                .http
                .get(format!("http://{addr}/_admin/workloads"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            out.extend(v);
        }
        Ok(out)
    }

    pub(crate) async fn live(&self) -> anyhow::Result<usize> {
        Ok(self
            .workloads()
            .await?
            .iter()
            .filter(|w| {
                !matches!(
                    w["state"].as_str(),
                    Some("TERMINATED" | "terminated" | "deleted" | "DELETED")
                )
            })
            .count())
    }
}
