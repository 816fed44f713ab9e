//! A submission checked against the schema of a real slurmrestd serving its dialect
//! (`schema::slurm`), answered as that daemon answers each kind of violation. Observed on the
//! daemons the schemas come from (scripts/schemas/slurm):
//! - 22.05 (`v0.0.38`) refuses a field it does not know: HTTP 400, `Unknown key "F"` (source
//!   `hsearch_r`) then error 9001 `Failure during parsing`; it takes a value of the wrong type
//!   without a word (`"nodes": [1, 2]` submitted a job).
//! - 24.11 (`v0.0.41`) drops a field it does not know and warns `Ignoring unknown field "F" of
//!   type T in DATA_PARSER_JOB_DESC_MSG` (source `#/job/F/`); a value it cannot convert is
//!   HTTP 500 with error 9208 (`Data parser expected a list`), 9209 (a dictionary) or 9202
//!   (`Unable to convert Data type`), with a warning `Expected OpenAPI type=...`.
//!
//! The daemon converts some wrong types with only that warning (a number for a boolean, a list
//! for a string); the emulator refuses every one, so the adapter cannot come to rely on a
//! conversion.

use super::*;
use crate::schema::{SlurmRelease, Violation, slurm};

/// The warnings to answer a valid submission with, or the refusal of an invalid one.
pub(super) fn check_submission(dialect: Dialect, body: &Value) -> Result<Vec<Value>, Response> {
    let release = match dialect {
        Dialect::V0038 => SlurmRelease::R2205,
        Dialect::V0041 => SlurmRelease::R2411,
    };
    let op = format!("POST /slurm/{}/job/submit", dialect.version());
    let violations = slurm(release).request_violations(&op, body);
    let source = |at: &str| {
        let path = at.trim_start_matches('$').replace('.', "/");
        format!("#{path}/")
    };
    match dialect {
        Dialect::V0038 => {
            let mut errors: Vec<Value> = violations
                .iter()
                .filter_map(|v| match v {
                    Violation::Unknown { fields, .. } => Some(fields),
                    _ => None,
                })
                .flatten()
                .map(|f| json!({"description": format!("Unknown key \"{f}\""), "source": "hsearch_r"}))
                .collect();
            if errors.is_empty() {
                return Ok(Vec::new());
            }
            errors.push(json!({"error_code": 9001, "error": "Failure during parsing"}));
            Err(json_response(
                StatusCode::BAD_REQUEST,
                json!({"meta": meta(dialect), "errors": errors}),
            ))
        }
        Dialect::V0041 => {
            let mut warnings = Vec::new();
            let mut errors = Vec::new();
            for v in &violations {
                match v {
                    Violation::Unknown { at, fields } => {
                        for f in fields {
                            warnings.push(json!({
                                "description": format!(
                                    "Ignoring unknown field \"{f}\" in DATA_PARSER_JOB_DESC_MSG"),
                                "source": source(&format!("{at}.{f}"))}));
                        }
                    }
                    Violation::Type { at, expected } => {
                        let (number, error) = match expected.as_str() {
                            "array" => (9208, "Data parser expected a list"),
                            "object" => (9209, "Data parser expected a dictionary"),
                            _ => (9202, "Unable to convert Data type"),
                        };
                        warnings.push(json!({
                            "description": format!("Expected OpenAPI type={expected}"),
                            "source": source(at)}));
                        errors.push(json!({
                            "description": format!("expected {expected}"),
                            "error_number": number, "error": error, "source": source(at)}));
                    }
                    Violation::Other { .. } => {}
                }
            }
            if errors.is_empty() {
                return Ok(warnings);
            }
            Err(json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"meta": meta(dialect), "errors": errors, "warnings": warnings}),
            ))
        }
    }
}
