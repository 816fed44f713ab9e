//! Kubernetes quantities (`500m`, `1.5Gi`, `2E`, `1e9`) as the API server's grammar writes
//! them, read into millicores and bytes for the providers.

/// A quantity that is not valid; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuantityError(pub String);

/// Parses a CPU quantity (`500m`, `2`, `1.5`, `2k`, `1e3`) into millicores.
pub fn parse_cpu(q: &str) -> Result<u64, QuantityError> {
    let bad = || QuantityError(format!("cpu quantity {q:?} is not valid"));
    // Millicores exactly, without a float's rounding.
    if let Some(m) = q.strip_suffix('m')
        && let Ok(m) = m.parse::<u64>()
    {
        return Ok(m);
    }
    value(q).and_then(|v| whole(v * 1000.0)).ok_or_else(bad)
}

/// Parses a memory quantity (`512Mi`, `1Gi`, `1G`, `1000`, `1.5Pi`, `1e9`) into bytes.
pub fn parse_memory(q: &str) -> Result<u64, QuantityError> {
    let bad = || QuantityError(format!("memory quantity {q:?} is not valid"));
    value(q).and_then(whole).ok_or_else(bad)
}

/// The value of a Kubernetes quantity in its base unit: a number followed by a binary SI
/// suffix (`Ki` to `Ei`), a decimal SI one (`n`, `u`, `m`, none, `k`, `M`, `G`, `T`, `P`, `E`)
/// or a decimal exponent (`e3`, `E-2`), as the API server's quantity grammar has it (the
/// serialization format in the comment of `Quantity`, k8s.io/apimachinery
/// `pkg/api/resource/quantity.go`); `None` for anything else or a negative value.
pub fn value(q: &str) -> Option<f64> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    if number.is_empty() {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    let binary = |p: i32| 2f64.powi(p);
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// `v` rounded to a whole number, if it fits.
fn whole(v: f64) -> Option<u64> {
    let r = v.round();
    (r < u64::MAX as f64).then_some(r as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suffix_of_the_quantity_grammar_is_read() {
        assert_eq!(parse_memory("1.5Pi").unwrap(), 3 << 49);
        assert_eq!(parse_memory("2E").unwrap(), 2_000_000_000_000_000_000);
        assert_eq!(parse_memory("1Ei").unwrap(), 1 << 60);
        assert_eq!(parse_memory("1e9").unwrap(), 1_000_000_000);
        assert_eq!(parse_memory("1E3").unwrap(), 1000);
        assert_eq!(parse_memory("1P").unwrap(), 1_000_000_000_000_000);
        assert_eq!(parse_cpu("2k").unwrap(), 2_000_000);
        assert_eq!(parse_cpu("1e-3").unwrap(), 1);
        assert_eq!(parse_cpu("100m").unwrap(), 100);
        assert_eq!(parse_cpu("1.5").unwrap(), 1500);
        assert_eq!(parse_cpu("500000u").unwrap(), 500);
        for bad in [
            "", "m", "1e", "1Xi", "-1", "1.5.2", "Gi", "1 Gi", "38e600", "99Ei9",
        ] {
            assert!(parse_memory(bad).is_err(), "{bad}");
        }
        assert!(parse_cpu("1e400").is_err());
    }
}
