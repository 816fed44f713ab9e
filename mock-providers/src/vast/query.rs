//! Vast query helpers: `{"field": {"op": value}}` filters and the Docker-flag `env` string
//! (`-e K=V -p 8000:8000`).

use std::cmp::Ordering;

use serde_json::Value;

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Number(y)) | (Value::Number(y), Value::Bool(x)) => {
            let yb = y.as_f64()? != 0.0;
            Some(x.cmp(&yb))
        }
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        _ => None,
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    compare(a, b) == Some(Ordering::Equal)
}

/// Does `actual` (the record's value of `field`) satisfy `cond` (`{"gte": 1}` or a bare value
/// meaning `eq`)? `Err` names an unknown operator.
///
/// Strings compare exactly, `gpu_name` included: the service matches the canonical name
/// ("RTX 4090"), so vast-ai/vast-cli does every normalisation on the client side:
/// `vastai/api/query.py` `parse_query` turns `_` into a space in query values
/// (`gpu_name=RTX_4090` is sent as "RTX 4090"), and `vastai/cli/commands/benchmarks.py`
/// `_canonical_gpu_names` maps lower-cased input to the canonical names "for resolving user
/// input like "rtx_4090"/"RTX 4090" to the canonical "RTX 4090"" before it searches. The
/// canonical names are the constants of `vastai/data/query.py` (`RTX_4090 = "RTX 4090"`,
/// `A100_SXM4 = "A100 SXM4"`, ...).
pub fn matches(field: &str, actual: &Value, cond: &Value) -> Result<bool, String> {
    let Value::Object(ops) = cond else {
        return Ok(equal(actual, cond));
    };
    for (op, want) in ops {
        let ok = match op.as_str() {
            "eq" => equal(actual, want),
            "neq" => !equal(actual, want),
            "gt" => compare(actual, want) == Some(Ordering::Greater),
            "gte" => matches!(
                compare(actual, want),
                Some(Ordering::Greater | Ordering::Equal)
            ),
            "lt" => compare(actual, want) == Some(Ordering::Less),
            "lte" => matches!(
                compare(actual, want),
                Some(Ordering::Less | Ordering::Equal)
            ),
            "in" | "notin" => {
                let Value::Array(items) = want else {
                    return Err(format!("operator '{op}' on '{field}' needs a list"));
                };
                let found = items.iter().any(|i| equal(actual, i));
                if op == "in" { found } else { !found }
            }
            other => return Err(format!("unknown operator '{other}' on '{field}'")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Apply every filter in `filters` to `record`; filters on fields the record lacks are ignored
/// when `lenient`, otherwise they are an error. The reference semantics of the offer search and
/// the instance list, which apply the same rules without building whole records.
#[cfg(test)]
pub fn record_matches(
    record: &serde_json::Map<String, Value>,
    filters: &serde_json::Map<String, Value>,
    lenient: bool,
) -> Result<bool, String> {
    for (field, cond) in filters {
        match record.get(field) {
            Some(actual) => {
                if !matches(field, actual, cond)? {
                    return Ok(false);
                }
            }
            None if lenient => {}
            None => return Err(format!("{field} is not a valid search key")),
        }
    }
    Ok(true)
}

/// Split a command line into words, honouring single and double quotes.
pub fn split_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some('"') if c == '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c == '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// Environment and port mappings from Vast's `env` (a Docker-flag string, or the object form
/// the CLI sends: `{"K": "V", "-p 8000:8000": "1"}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedEnv {
    /// Variables in order.
    pub vars: Vec<(String, String)>,
    /// `-p` mappings (`8000:8000`).
    pub ports: Vec<String>,
}

/// Parse the `env` field; `Err` for a value that is neither a string nor an object of strings.
pub fn parse_env(v: &Value) -> Result<ParsedEnv, String> {
    let mut out = ParsedEnv::default();
    match v {
        Value::Null => {}
        Value::String(s) => {
            let words = split_words(s);
            let mut i = 0;
            while i < words.len() {
                let w = &words[i];
                let next = words.get(i + 1);
                match w.as_str() {
                    "-e" | "--env" => {
                        if let Some(kv) = next {
                            push_var(&mut out, kv);
                            i += 1;
                        }
                    }
                    "-p" | "--publish" => {
                        if let Some(p) = next {
                            out.ports.push(p.clone());
                            i += 1;
                        }
                    }
                    // Other docker flags with a value (-h host, --shm-size 1g, ...).
                    flag if flag.starts_with('-') && !flag.contains('=') => {
                        if next.is_some_and(|n| !n.starts_with('-')) {
                            i += 1;
                        }
                    }
                    other => {
                        if let Some(kv) = other.strip_prefix("--env=") {
                            push_var(&mut out, kv);
                        } else if let Some(p) = other.strip_prefix("--publish=") {
                            out.ports.push(p.to_owned());
                        }
                    }
                }
                i += 1;
            }
        }
        Value::Object(m) => {
            for (k, val) in m {
                let val = match val {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return Err(format!("env value for '{k}' must be a string")),
                };
                if let Some(p) = k.strip_prefix("-p ") {
                    out.ports.push(p.trim().to_owned());
                } else {
                    out.vars.push((k.clone(), val));
                }
            }
        }
        _ => return Err("env must be a string of docker flags or an object".into()),
    }
    Ok(out)
}

fn push_var(out: &mut ParsedEnv, kv: &str) {
    match kv.split_once('=') {
        Some((k, v)) => out.vars.push((k.to_owned(), v.to_owned())),
        None => out.vars.push((kv.to_owned(), String::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operators() {
        assert!(matches("num_gpus", &json!(4), &json!({"gte": 1})).unwrap());
        assert!(!matches("num_gpus", &json!(4), &json!({"lt": 4})).unwrap());
        assert!(matches("gpu_name", &json!("RTX 4090"), &json!({"in": ["RTX 4090"]})).unwrap());
        // Exact names only: no case folding, no `_` for a space, no spaces dropped.
        for near in ["RTX_4090", "rtx 4090", "RTX4090", " RTX 4090"] {
            assert!(
                !matches("gpu_name", &json!("RTX 4090"), &json!({"eq": near})).unwrap(),
                "{near:?}"
            );
            assert!(!matches("gpu_name", &json!("RTX 4090"), &json!(near)).unwrap());
        }
        assert!(matches("gpu_name", &json!("RTX 4090"), &json!({"notin": ["A100"]})).unwrap());
        assert!(matches("verified", &json!(true), &json!({"eq": true})).unwrap());
        assert!(matches("verified", &json!(true), &json!(true)).unwrap());
        assert!(matches("x", &json!(1), &json!({"bogus": 1})).is_err());
    }

    #[test]
    fn env_string_and_object() {
        let e = parse_env(&json!("-e HF_TOKEN=hf_x -e 'MSG=a b' -p 8000:8000 -h box")).unwrap();
        assert_eq!(
            e.vars,
            vec![
                ("HF_TOKEN".into(), "hf_x".into()),
                ("MSG".into(), "a b".into())
            ]
        );
        assert_eq!(e.ports, vec!["8000:8000".to_owned()]);
        let e = parse_env(&json!({"A": "1", "-p 8188:8188": "1"})).unwrap();
        assert_eq!(e.vars, vec![("A".into(), "1".into())]);
        assert_eq!(e.ports, vec!["8188:8188".to_owned()]);
        assert!(parse_env(&json!([1])).is_err());
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words(r#"a "b c" 'd e' f\ g"#),
            ["a", "b c", "d e", "f g"]
        );
    }
}
