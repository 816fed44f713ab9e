//! What the adapters read from a workload besides its container: the pod options
//! (`gpu-vk.io/*` annotations, e.g. `disk_gb`, `interruptible`, `partition`), and the shell
//! quoting of the words an adapter hands to a shell (RunPod's and Vast's one-string arguments,
//! Slurm's batch script).
//!
//! An option that is present but unreadable is [`ProviderError::Invalid`]: the pod asks for
//! something this adapter cannot honour, so another attempt would not help.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::provider::{ProviderError, Workload};

/// The options of one workload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Options<'a>(&'a BTreeMap<String, String>);

impl<'a> Options<'a> {
    pub fn of(w: &'a Workload) -> Self {
        Self(&w.options)
    }

    /// A text option, trimmed; an empty one counts as unset.
    pub fn text(&self, key: &str) -> Option<String> {
        self.0
            .get(key)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// An option parsed by its type, whose parse error is the message.
    pub fn parsed<T: FromStr<Err = String>>(&self, key: &str) -> Result<Option<T>, ProviderError> {
        self.0
            .get(key)
            .map(|raw| {
                raw.parse::<T>()
                    .map_err(|message| ProviderError::Invalid { message })
            })
            .transpose()
    }

    /// A boolean option (`true/false`, `yes/no`, `1/0`).
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ProviderError> {
        let Some(raw) = self.0.get(key) else {
            return Ok(None);
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Ok(Some(true)),
            "false" | "no" | "0" => Ok(Some(false)),
            _ => Err(ProviderError::Invalid {
                message: format!("option {key}={raw:?} is not a boolean"),
            }),
        }
    }

    /// A positive number option.
    pub fn positive(&self, key: &str) -> Result<Option<f64>, ProviderError> {
        let Some(raw) = self.0.get(key) else {
            return Ok(None);
        };
        match raw.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
            _ => Err(ProviderError::Invalid {
                message: format!("option {key}={raw:?} is not a positive number"),
            }),
        }
    }

    /// A text option the operator bounds: the pod may choose the configured `default` or one of
    /// `allowed`, nothing else (an annotation narrows what the operator configured, it never
    /// widens it). Unset: the default.
    pub fn within(
        &self,
        key: &str,
        default: Option<&str>,
        allowed: &[String],
    ) -> Result<Option<String>, ProviderError> {
        let Some(chosen) = self.text(key) else {
            return Ok(default.map(str::to_owned));
        };
        if default == Some(chosen.as_str()) || allowed.contains(&chosen) {
            return Ok(Some(chosen));
        }
        let mut choices: Vec<&str> = default.into_iter().collect();
        choices.extend(
            allowed
                .iter()
                .map(String::as_str)
                .filter(|a| Some(*a) != default),
        );
        Err(ProviderError::Invalid {
            message: format!(
                "option {key}={chosen:?} is not allowed by the operator (allowed: {})",
                if choices.is_empty() {
                    "none".to_owned()
                } else {
                    choices.join(", ")
                }
            ),
        })
    }

    /// A positive number option that may not exceed the operator's `ceiling` (when set).
    pub fn positive_at_most(
        &self,
        key: &str,
        ceiling: Option<f64>,
    ) -> Result<Option<f64>, ProviderError> {
        let value = self.positive(key)?;
        match (value, ceiling) {
            (Some(v), Some(c)) if v > c => Err(ProviderError::Invalid {
                message: format!("option {key}={v} is above the operator's ceiling of {c}"),
            }),
            _ => Ok(value),
        }
    }

    /// The container disk in GB: the pod's `disk_gb`, else its `ephemeral-storage` (the VK's
    /// `ephemeral_storage_gb`) where that is above the provider's `default`, else `default`;
    /// above the operator's `ceiling`, refused.
    pub fn disk_gb(&self, default: f64, ceiling: Option<f64>) -> Result<f64, ProviderError> {
        if let Some(gb) = self.positive_at_most("disk_gb", ceiling)? {
            return Ok(gb);
        }
        match self.positive_at_most("ephemeral_storage_gb", ceiling)? {
            Some(gb) if gb > default => Ok(gb),
            _ => Ok(default),
        }
    }

    /// A positive whole number of minutes; an empty option counts as unset.
    pub fn minutes(&self, key: &str) -> Result<Option<u32>, ProviderError> {
        let Some(raw) = self.text(key) else {
            return Ok(None);
        };
        match raw.parse::<u32>() {
            Ok(m) if m > 0 => Ok(Some(m)),
            _ => Err(ProviderError::Invalid {
                message: format!("option {key}={raw:?} is not a positive number of minutes"),
            }),
        }
    }

    /// A comma-separated list option, from the first of `keys` present.
    pub fn list(&self, keys: &[&str]) -> Option<Vec<String>> {
        let raw = keys.iter().find_map(|k| self.0.get(*k))?;
        Some(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn message(e: ProviderError) -> String {
        match e {
            ProviderError::Invalid { message } => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_disk_is_the_pods_own_else_its_ephemeral_storage_above_the_default() {
        let disk = |pairs: &[(&str, &str)], ceiling| {
            let map = options(pairs);
            Options(&map).disk_gb(20.0, ceiling)
        };
        assert_eq!(disk(&[], None).unwrap(), 20.0);
        // ephemeral-storage raises the default, never lowers it (the image must still fit).
        assert_eq!(disk(&[("ephemeral_storage_gb", "33")], None).unwrap(), 33.0);
        assert_eq!(disk(&[("ephemeral_storage_gb", "2")], None).unwrap(), 20.0);
        // The pod's own disk wins, either way.
        assert_eq!(
            disk(&[("disk_gb", "10"), ("ephemeral_storage_gb", "33")], None).unwrap(),
            10.0
        );
        // Above the operator's ceiling: refused, naming it.
        let e = message(disk(&[("ephemeral_storage_gb", "300")], Some(200.0)).unwrap_err());
        assert!(
            e.contains("ephemeral_storage_gb=300") && e.contains("200"),
            "{e}"
        );
    }

    #[test]
    fn options_parse_or_are_invalid() {
        let map = options(&[
            ("yes", " Yes "),
            ("disk_gb", "20.5"),
            ("bad", "-1"),
            ("time_limit", " 90 "),
            ("empty", "  "),
            ("region", "us, ,eu"),
        ]);
        let o = Options(&map);
        assert_eq!(o.bool("yes").unwrap(), Some(true));
        assert_eq!(o.bool("missing").unwrap(), None);
        assert_eq!(
            message(o.bool("disk_gb").unwrap_err()),
            r#"option disk_gb="20.5" is not a boolean"#
        );
        assert_eq!(o.positive("disk_gb").unwrap(), Some(20.5));
        assert_eq!(
            message(o.positive("bad").unwrap_err()),
            r#"option bad="-1" is not a positive number"#
        );
        assert_eq!(o.minutes("time_limit").unwrap(), Some(90));
        assert_eq!(o.minutes("empty").unwrap(), None);
        assert_eq!(
            message(o.minutes("bad").unwrap_err()),
            r#"option bad="-1" is not a positive number of minutes"#
        );
        assert_eq!(o.text("empty"), None);
        assert_eq!(o.text("yes").as_deref(), Some("Yes"));
        assert_eq!(
            o.list(&["zone", "region"]),
            Some(vec!["us".to_owned(), "eu".to_owned()])
        );
        assert_eq!(o.list(&["zone"]), None);
        assert_eq!(o.parsed::<Word>("yes").unwrap(), Some(Word));
        assert_eq!(message(o.parsed::<Word>("bad").unwrap_err()), "not a word");
    }

    #[derive(Debug, PartialEq)]
    struct Word;

    impl FromStr for Word {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            if s.trim().chars().all(char::is_alphabetic) {
                Ok(Self)
            } else {
                Err("not a word".into())
            }
        }
    }
}
