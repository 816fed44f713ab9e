//! Wire helpers shared by the adapters' JSON APIs: lenient field decoding (one odd field
//! never breaks a list), ids sent as numbers or strings, epoch timestamps, and the
//! environment as an object; and the check that a list is whole before anything is judged on it.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// For `#[serde(default, deserialize_with = "lenient")]`: a field of an unexpected type
/// decodes as `None` instead of failing the whole object, so one odd item never breaks a list.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// `Err(Malformed)` when a listed entry of this VK's (its name a workload id) lacks the
/// provider's id for it (`field`, by the schema's name): the list is not whole, so the caller
/// returns the error and nothing is judged on it (a workload missing from a partial list would
/// otherwise be taken for lost and started again). `entries` are (name, has an id).
pub(crate) fn whole_list<'a>(
    provider: &str,
    field: &str,
    entries: impl IntoIterator<Item = (Option<&'a str>, bool)>,
) -> Result<(), crate::provider::ProviderError> {
    let missing = entries.into_iter().find_map(|(name, has_id)| {
        let name = name?.trim();
        (!has_id && crate::naming::WorkloadId::parse(name).is_some()).then_some(name)
    });
    match missing {
        None => Ok(()),
        Some(name) => Err(crate::provider::ProviderError::Malformed {
            provider: provider.to_owned(),
            field: field.to_owned(),
            message: format!(
                "the listed workload {name} has no {field}, which the provider's schema \
                 requires; nothing is judged on this list until it is whole"
            ),
        }),
    }
}

/// An id that providers send as a number or a string.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub(crate) enum NumOrString {
    Num(u64),
    Str(String),
}

impl fmt::Display for NumOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Num(n) => write!(f, "{n}"),
            Self::Str(s) => f.write_str(s),
        }
    }
}

/// Environment as the APIs take it: a map, later duplicates winning as in Kubernetes.
pub(crate) fn env_map(env: &[crate::provider::EnvVar]) -> BTreeMap<String, String> {
    env.iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

/// A usage figure a provider reported, rounded, if it is a number a counter can hold
/// (finite, not negative, below `u64::MAX`); `None` makes the usage unknown rather than a
/// saturated 18 EB.
pub(crate) fn usage_figure(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then(|| v.round() as u64)
}

/// A timestamp from epoch seconds (fractional allowed).
pub(crate) fn timestamp_from_epoch(secs: f64) -> Option<jiff::Timestamp> {
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    // Rounded to whole seconds: providers report sub-second jitter that is not worth a status
    // update.
    jiff::Timestamp::from_second(secs.round() as i64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_whole_unless_an_entry_of_ours_lacks_its_id() {
        let w = crate::test_support::workload();
        let ours = w.id.as_str();
        assert!(whole_list("p", "Pod.id", [(Some("notebook"), false), (None, false)]).is_ok());
        assert!(whole_list("p", "Pod.id", [(Some(ours), true)]).is_ok());
        let err = whole_list(
            "p",
            "Pod.id",
            [(Some("notebook"), true), (Some(ours), false)],
        )
        .unwrap_err();
        assert!(
            matches!(&err, crate::provider::ProviderError::Malformed { field, message, .. }
                if field == "Pod.id" && message.contains(ours)),
            "{err:?}"
        );
    }

    #[derive(Debug, Deserialize)]
    struct Item {
        #[serde(default, deserialize_with = "lenient")]
        count: Option<u32>,
        #[serde(default, deserialize_with = "lenient")]
        id: Option<NumOrString>,
    }

    #[test]
    fn odd_fields_decode_as_none() {
        let item: Item = serde_json::from_str(r#"{"count": "many", "id": 7}"#).unwrap();
        assert_eq!(item.count, None);
        assert_eq!(item.id.map(|i| i.to_string()).as_deref(), Some("7"));
        let item: Item = serde_json::from_str(r#"{"id": "c-1"}"#).unwrap();
        assert_eq!(item.id, Some(NumOrString::Str("c-1".into())));
    }

    #[test]
    fn epoch_timestamps() {
        assert_eq!(
            timestamp_from_epoch(1_700_000_000.4).map(|t| t.as_second()),
            Some(1_700_000_000)
        );
        assert_eq!(timestamp_from_epoch(0.0), None);
        assert_eq!(timestamp_from_epoch(f64::NAN), None);
    }
}
