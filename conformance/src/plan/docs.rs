//! The tables of docs/testbed.md ("Which feature runs where") written from the plan, and the
//! check that the document holds them as written.

use super::{Plan, PlanError};

/// Where the generated text starts and ends in docs/testbed.md.
pub const BEGIN: &str = "<!-- generated from conformance/plan.toml: begin -->";
pub const END: &str = "<!-- generated from conformance/plan.toml: end -->";

/// `features` of `target` in words: "all", "all but a, b", or the list.
fn features_text(
    plan: &Plan,
    run: &str,
    target: &str,
    known: &[String],
) -> Result<String, PlanError> {
    let mine = plan.features(Some(run), target, known)?;
    if mine.len() == known.len() {
        return Ok("all".into());
    }
    let missing: Vec<&str> = known
        .iter()
        .filter(|f| !mine.contains(f))
        .map(String::as_str)
        .collect();
    if plan.runs[run].features.is_none() {
        return Ok(format!("all but {}", missing.join(", ")));
    }
    Ok(mine.join(", "))
}

/// The generated Markdown (between [`BEGIN`] and [`END`], exclusive).
pub fn markdown(plan: &Plan, known: &[String]) -> Result<String, PlanError> {
    let mut out = String::new();
    out.push_str("| run (`CONFORMANCE_RUN`) | where | targets | features | why there |\n");
    out.push_str("| --- | --- | --- | --- | --- |\n");
    let mut runs: Vec<(&String, &super::Run)> = plan.runs.iter().collect();
    runs.sort_by_key(|(name, r)| (r.order, (*name).clone()));
    for (name, run) in runs {
        // Targets with the same features share a row.
        let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
        for t in &run.targets {
            let text = features_text(plan, name, t, known)?;
            match groups.iter_mut().find(|(f, _)| *f == text) {
                Some((_, ts)) => ts.push(t),
                None => groups.push((text, vec![t])),
            }
        }
        for (i, (features, targets)) in groups.into_iter().enumerate() {
            let why = if i == 0 {
                run.why.as_str()
            } else {
                "(as above)"
            };
            out.push_str(&format!(
                "| {name} | {} | {} | {features} | {why} |\n",
                run.place,
                targets.join(", "),
            ));
        }
    }
    out.push_str("\nWhat each target can do; a scenario that needs what a target lacks is a declared skip there, reported with the reason:\n\n");
    out.push_str("| target | what it is | capabilities |\n| --- | --- | --- |\n");
    for (name, t) in &plan.targets {
        out.push_str(&format!(
            "| {name} | {} | {} |\n",
            t.about,
            t.capabilities.join(", ")
        ));
    }
    out.push_str("\nConditions of a run, granted where the reason says:\n\n");
    out.push_str("| condition | where |\n| --- | --- |\n");
    for (sentence, why) in &plan.conditions {
        out.push_str(&format!("| {sentence} | {why} |\n"));
    }
    Ok(out)
}

/// `doc` with the generated part replaced by `generated`; `None` when the markers are missing.
pub fn splice(doc: &str, generated: &str) -> Option<String> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = doc[start..].find(END)? + start;
    Some(format!("{}\n{}{}", &doc[..start], generated, &doc[end..]))
}
