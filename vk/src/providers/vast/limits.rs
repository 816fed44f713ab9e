//! The rent request's input limits, checked before any call so that a pod the real service
//! would refuse fails at once with a message naming the limit.
//!
//! Source: `x-input-validation` of `PUT /api/v0/asks/{id}/` in vast-ai/docs
//! `api-reference/openapi/yaml/create_instance.yaml`: `image` <= 1024 characters; `args`,
//! `args_str` and `onstart` together <= 4096; `label` <= 256; every `env` entry <= 256 and all
//! of them <= 32768; `price` 0.001..=128 $/h; `disk` >= 8 GB. The spec does not say whether an
//! env entry is the value or `KEY=VALUE`: the stricter `KEY=VALUE` is checked, so nothing this
//! check passes is refused by the service.

use std::collections::BTreeMap;

/// Longest `image`.
pub const MAX_IMAGE: usize = 1024;
/// Longest `args` + `args_str` + `onstart`, together.
pub const MAX_ARGS: usize = 4096;
/// Longest `label`.
pub const MAX_LABEL: usize = 256;
/// Longest `env` entry (`KEY=VALUE`).
pub const MAX_ENV_ENTRY: usize = 256;
/// Longest `env` in total.
pub const MAX_ENV_TOTAL: usize = 32 * 1024;
/// Smallest `disk`, GB.
pub const MIN_DISK_GB: f64 = 8.0;
/// Bid price bounds, $/h.
pub const PRICE_RANGE: (f64, f64) = (0.001, 128.0);

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The first limit the request breaks, as a message naming it.
pub(super) fn check(
    image: &str,
    label: &str,
    onstart: Option<&str>,
    args: &[String],
    env: &BTreeMap<String, String>,
    disk: f64,
    price: Option<f64>,
) -> Result<(), String> {
    if chars(image) > MAX_IMAGE {
        return Err(format!(
            "Vast limit: the image name is {} characters, above the {MAX_IMAGE} allowed",
            chars(image)
        ));
    }
    if chars(label) > MAX_LABEL {
        return Err(format!(
            "Vast limit: the instance label is {} characters, above the {MAX_LABEL} allowed",
            chars(label)
        ));
    }
    let command_len = onstart.map_or(0, chars) + args.iter().map(|a| chars(a)).sum::<usize>();
    if command_len > MAX_ARGS {
        return Err(format!(
            "Vast limit: command and args are {command_len} characters together, above the \
             {MAX_ARGS} allowed"
        ));
    }
    let mut total = 0usize;
    for (k, v) in env {
        let entry = chars(k) + 1 + chars(v);
        if entry > MAX_ENV_ENTRY {
            let what = if k.starts_with("-p ") {
                format!("port mapping {k:?}")
            } else {
                format!("env variable {k}")
            };
            return Err(format!(
                "Vast limit: {what} is {entry} characters as KEY=VALUE, above the \
                 {MAX_ENV_ENTRY} allowed per env entry"
            ));
        }
        total += entry;
    }
    if total > MAX_ENV_TOTAL {
        return Err(format!(
            "Vast limit: the env is {total} characters in total, above the {MAX_ENV_TOTAL} allowed"
        ));
    }
    if disk < MIN_DISK_GB {
        return Err(format!(
            "Vast limit: disk {disk} GB is below the {MIN_DISK_GB} GB minimum"
        ));
    }
    if let Some(p) = price
        && !(PRICE_RANGE.0..=PRICE_RANGE.1).contains(&p)
    {
        return Err(format!(
            "Vast limit: bid price {p} $/h is outside {}..={} $/h",
            PRICE_RANGE.0, PRICE_RANGE.1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn each_limit_is_named() {
        let ok = |e: &BTreeMap<String, String>| check("img", "l", None, &[], e, 20.0, None);
        assert!(
            ok(&env(&[("A", "x".repeat(254))])).is_ok(),
            "A= + 254 = 256"
        );
        let e = ok(&env(&[("A", "x".repeat(255))])).unwrap_err();
        assert!(e.contains("env variable A") && e.contains("256"), "{e}");
        let many: Vec<(String, String)> = (0..200)
            .map(|i| (format!("K{i:03}"), "v".repeat(200)))
            .collect();
        let big: BTreeMap<String, String> = many.into_iter().collect();
        assert!(ok(&big).unwrap_err().contains("32768"));
        let long = vec!["a".repeat(4000), "b".repeat(94)];
        assert!(check("i", "l", Some("sh"), &long, &BTreeMap::new(), 20.0, None).is_ok());
        let e = check("i", "l", Some("bash"), &long, &BTreeMap::new(), 20.0, None).unwrap_err();
        assert!(e.contains("4096"), "{e}");
        let e = check("i", "l", None, &[], &BTreeMap::new(), 7.5, None).unwrap_err();
        assert!(e.contains("8 GB"), "{e}");
        let e = check(
            "i",
            &"l".repeat(257),
            None,
            &[],
            &BTreeMap::new(),
            8.0,
            None,
        )
        .unwrap_err();
        assert!(e.contains("label"), "{e}");
        let e = check(
            &"i".repeat(1025),
            "l",
            None,
            &[],
            &BTreeMap::new(),
            8.0,
            None,
        )
        .unwrap_err();
        assert!(e.contains("image"), "{e}");
        let e = check("i", "l", None, &[], &BTreeMap::new(), 8.0, Some(200.0)).unwrap_err();
        assert!(e.contains("bid price"), "{e}");
    }
}
