//! The plan's rules on small plans, and the repository's own plan against features/ and
//! docs/testbed.md.

use super::*;
use std::path::PathBuf;

const SMALL: &str = r#"
[targets.a]
about = "A"
capabilities = ["logs", "does not support exec", "runs one container per workload"]
[targets.b]
about = "B"
capabilities = ["preemption"]
[unclaimed]
"does not support logs" = "nobody"
[conditions]
"the provider is the first of this run" = "once per run"
[runs.r]
order = 1
where = "here"
targets = ["a", "b"]
leave_out.b = ["two"]
why = "because"
[runs.s]
order = 2
where = "there"
targets = ["a"]
features = ["one"]
more.a = ["three"]
why = "also"
"#;

fn known() -> Vec<String> {
    vec!["one".into(), "three".into(), "two".into()]
}

fn granted(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

#[test]
fn a_scenario_gated_on_a_missing_capability_is_a_declared_skip_with_its_reason() {
    let plan = Plan::parse(SMALL).unwrap();
    let steps = [
        "a GPU pod \"x\" is Running",
        "the provider supports preemption",
    ];
    let reason = plan.skip_reason(steps, &granted(&["logs"]));
    assert_eq!(reason.as_deref(), Some("the target lacks \"preemption\""));
    assert_eq!(plan.skip_reason(steps, &granted(&["preemption"])), None);
}

#[test]
fn conditions_and_sentence_forms_are_gates() {
    let plan = Plan::parse(SMALL).unwrap();
    let reason = plan.skip_reason(["the provider is the first of this run"], &granted(&[]));
    assert_eq!(
        reason.as_deref(),
        Some("not \"the provider is the first of this run\": once per run")
    );
    assert_eq!(
        plan.gate("the provider runs one container per workload"),
        Some(Gate::Capability("runs one container per workload".into()))
    );
    assert_eq!(
        plan.gate("the provider does not support exec"),
        Some(Gate::Capability("does not support exec".into()))
    );
    assert_eq!(plan.gate("a GPU pod \"x\" is Running"), None);
    for cap in [
        "logs",
        "does not support exec",
        "runs one container per workload",
    ] {
        assert_eq!(capability_of(&sentence_of(cap)).as_deref(), Some(cap));
    }
}

#[test]
fn a_scenario_with_every_gate_granted_has_no_excuse_to_skip() {
    let plan = Plan::parse(SMALL).unwrap();
    let steps = ["the provider supports logs", "a step with a typo in it"];
    assert_eq!(plan.skip_reason(steps, &granted(&["logs"])), None);
}

#[test]
fn a_capability_nobody_declares_is_refused_naming_the_step() {
    let plan = Plan::parse(SMALL).unwrap();
    let err = plan
        .check_steps("f.feature", ["the provider supports prememption"])
        .unwrap_err();
    assert!(err.to_string().contains("prememption"), "{err}");
    plan.check_steps(
        "f.feature",
        [
            "the provider does not support logs",
            "the provider supports preemption",
        ],
    )
    .unwrap();
}

#[test]
fn features_per_run_and_target() {
    let plan = Plan::parse(SMALL).unwrap();
    let k = known();
    assert_eq!(plan.features(Some("r"), "a", &k).unwrap(), k);
    assert_eq!(
        plan.features(Some("r"), "b", &k).unwrap(),
        vec!["one", "three"]
    );
    assert_eq!(
        plan.features(Some("s"), "a", &k).unwrap(),
        vec!["one", "three"]
    );
    assert_eq!(plan.features(None, "b", &k).unwrap(), k);
    assert!(matches!(
        plan.features(Some("s"), "b", &k),
        Err(PlanError::NotInRun { .. })
    ));
    assert!(matches!(
        plan.features(Some("nope"), "a", &k),
        Err(PlanError::UnknownRun { .. })
    ));
    assert!(matches!(
        plan.features(None, "c", &k),
        Err(PlanError::UnknownTarget { .. })
    ));
}

#[test]
fn a_list_naming_a_missing_feature_fails_listing_the_known_ones() {
    let plan =
        Plan::parse(&SMALL.replace("leave_out.b = [\"two\"]", "leave_out.b = [\"twoo\"]")).unwrap();
    let err = plan.check(&known()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("\"twoo\"") && text.contains("one, three, two"),
        "{text}"
    );
    let err = check_features("CONFORMANCE_FEATURES", &list("one, nine"), &known()).unwrap_err();
    assert!(
        err.to_string()
            .contains("CONFORMANCE_FEATURES names unknown features [\"nine\"]"),
        "{err}"
    );
}

#[test]
fn a_plan_with_an_unknown_field_or_target_is_refused() {
    assert!(matches!(
        Plan::parse(&SMALL.replace("about = \"A\"", "abut = \"A\"")),
        Err(PlanError::Parse(_))
    ));
    let plan = Plan::parse(&SMALL.replace("targets = [\"a\"]", "targets = [\"c\"]")).unwrap();
    assert!(matches!(
        plan.check(&known()),
        Err(PlanError::UnknownTarget { .. })
    ));
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn the_repositorys_plan_names_only_features_that_exist() {
    let plan = Plan::load(&repo().join("conformance/plan.toml")).unwrap();
    let known = features_in(&repo().join("features")).unwrap();
    plan.check(&known).unwrap();
}

/// docs/testbed.md holds the tables as the plan writes them; `UPDATE_PLAN_DOCS=1` rewrites them.
#[test]
fn docs_testbed_md_holds_the_generated_tables() {
    let plan = Plan::load(&repo().join("conformance/plan.toml")).unwrap();
    let known = features_in(&repo().join("features")).unwrap();
    let path = repo().join("docs/testbed.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let want = docs::splice(&doc, &docs::markdown(&plan, &known).unwrap())
        .expect("docs/testbed.md has the generated-table markers");
    if std::env::var_os("UPDATE_PLAN_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert!(
        doc == want,
        "docs/testbed.md's tables differ from conformance/plan.toml: run \
         `UPDATE_PLAN_DOCS=1 cargo test -p conformance --lib plan` and commit the result"
    );
}
