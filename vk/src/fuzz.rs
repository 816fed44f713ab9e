//! Fuzzing with proptest, run by `cargo test` ([`cases`] per target; failures are kept in
//! `vk/proptest-regressions/`, committed, and replayed first). Targets that hold
//! bytes or JSON from outside: the SPDY header blocks and the WebSocket channel messages of a
//! client, every field of a pod (spec translation), and the providers' list answers (each
//! provider's own module: `providers::{runpod, vast, slurm}::fuzz`). What each asserts: an
//! answer or an error, never a panic, and the bounds it promises.
//!
//! Provider answers are fuzzed by mutation: a valid answer with some of its leaves replaced by
//! values of any JSON type, extremes included ([`mutate`]), so most cases still decode and reach
//! the code behind the decoder.

use proptest::prelude::*;
use serde_json::{Value, json};

/// Cases per target: 256 in `make test` (enough for the shallow bugs, in well under a second
/// per target), or `FUZZ_CASES` for a longer run (`FUZZ_CASES=100000 cargo test -p vk --lib
/// fuzz`).
pub fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// A JSON leaf of any type, extremes included.
pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(json!(i64::MIN)),
            Just(json!(i64::MAX)),
            Just(json!(u64::MAX)),
            Just(json!(0)),
            Just(json!(-1)),
            Just(json!(1e308)),
            Just(json!(-1e308)),
            Just(json!(f64::MIN_POSITIVE)),
        ],
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        "[0-9a-f:.\\[\\]-]{0,24}".prop_map(Value::String),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// Edits for [`mutate`]: which leaf (modulo their number) gets which value.
pub fn edits() -> impl Strategy<Value = Vec<(usize, Value)>> {
    proptest::collection::vec((any::<usize>(), leaf()), 1..6)
}

/// `base` with the leaves the edits pick replaced (leaves counted depth-first, object keys in
/// order; a leaf is any value that is not a non-empty array or object).
pub fn mutate(base: &Value, edits: &[(usize, Value)]) -> Value {
    let mut v = base.clone();
    for (pick, value) in edits {
        let n = count(&v);
        if n > 0 {
            let mut at = pick % n;
            replace(&mut v, &mut at, value);
        }
    }
    v
}

fn count(v: &Value) -> usize {
    match v {
        Value::Array(a) if !a.is_empty() => a.iter().map(count).sum(),
        Value::Object(o) if !o.is_empty() => o.values().map(count).sum(),
        _ => 1,
    }
}

/// Replaces the `at`-th leaf; true once done.
fn replace(v: &mut Value, at: &mut usize, with: &Value) -> bool {
    match v {
        Value::Array(a) if !a.is_empty() => a.iter_mut().any(|x| replace(x, at, with)),
        Value::Object(o) if !o.is_empty() => o.values_mut().any(|x| replace(x, at, with)),
        _ if *at == 0 => {
            *v = with.clone();
            true
        }
        _ => {
            *at -= 1;
            false
        }
    }
}

#[path = "fuzz/targets.rs"]
mod targets;
#[path = "fuzz/tenants.rs"]
mod tenants;

mod tests {
    use super::*;

    #[test]
    fn mutation_replaces_the_picked_leaves_only() {
        let base = json!({"a": 1, "b": {"c": "x", "d": [true, null]}, "e": []});
        assert_eq!(count(&base), 5);
        let got = mutate(&base, &[(1, json!(42)), (7, json!("y"))]);
        assert_eq!(
            got,
            json!({"a": 1, "b": {"c": 42, "d": ["y", null]}, "e": []})
        );
    }
}
