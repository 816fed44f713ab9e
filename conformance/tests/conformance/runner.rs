//! The runner's side of `conformance/plan.toml`: which features a target runs, which gates it
//! grants, whether a skipped scenario was declared (a gate it lacks) or is a failure (a step that
//! matched nothing), and the report of both per target. Bad lists and unreadable plans stop the
//! run before anything starts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use conformance::plan::{self, Plan};
use cucumber::gherkin;

/// Prints why and stops the whole run (exit 2): nothing ran, nothing may look green.
pub fn stop(why: impl std::fmt::Display) -> ! {
    eprintln!("conformance: {why}");
    std::process::exit(2);
}

/// The plan, the features it may name, and the run chosen by `CONFORMANCE_RUN`.
pub struct Setup {
    pub plan: Plan,
    pub known: Vec<String>,
    pub features_dir: PathBuf,
    pub run: Option<String>,
    /// `CONFORMANCE_FEATURES`, checked against `known`.
    pub only: Option<Vec<String>>,
}

impl Setup {
    /// Reads everything the run depends on, stopping at the first thing wrong.
    pub fn load(repo: &Path) -> Self {
        let plan_path = std::env::var_os("CONFORMANCE_PLAN")
            .map_or_else(|| repo.join("conformance/plan.toml"), PathBuf::from);
        let features_dir = std::env::var_os("CONFORMANCE_FEATURES_DIR")
            .map_or_else(|| repo.join("features"), PathBuf::from);
        let plan = Plan::load(&plan_path).unwrap_or_else(|e| stop(e));
        let known = plan::features_in(&features_dir).unwrap_or_else(|e| stop(e));
        if known.is_empty() {
            stop(format!("no feature files in {}", features_dir.display()));
        }
        let fixtures = features_dir != repo.join("features");
        // The plan's lists name the repository's features; a fixture folder has its own.
        if !fixtures {
            plan.check(&known).unwrap_or_else(|e| stop(e));
        }
        let run = std::env::var("CONFORMANCE_RUN")
            .ok()
            .filter(|r| !r.is_empty());
        if let Some(r) = &run {
            plan.run(r).unwrap_or_else(|e| stop(e));
        }
        let only = std::env::var("CONFORMANCE_FEATURES")
            .ok()
            .map(|l| plan::list(&l))
            .filter(|l| !l.is_empty());
        if let Some(o) = &only {
            plan::check_features("CONFORMANCE_FEATURES", o, &known).unwrap_or_else(|e| stop(e));
        }
        let setup = Self {
            plan,
            known,
            features_dir,
            run,
            only,
        };
        setup.check_vocabulary();
        setup
    }

    /// Every capability a feature's `Given` steps name is declared by some target.
    fn check_vocabulary(&self) {
        for name in &self.known {
            let path = self.features_dir.join(format!("{name}.feature"));
            let feature = gherkin::Feature::parse_path(&path, gherkin::GherkinEnv::default())
                .unwrap_or_else(|e| stop(format!("{}: {e}", path.display())));
            for scenario in scenarios(&feature) {
                let steps = given_steps(&feature, scenario);
                self.plan
                    .check_steps(&format!("{name}.feature"), steps.iter().map(String::as_str))
                    .unwrap_or_else(|e| stop(e));
            }
        }
    }

    /// The features `target` runs: the run's, narrowed by `CONFORMANCE_FEATURES`.
    pub fn features(&self, target: &str) -> Vec<String> {
        let mine = self
            .plan
            .features(self.run.as_deref(), target, &self.known)
            .unwrap_or_else(|e| stop(e));
        match &self.only {
            Some(o) => mine.into_iter().filter(|f| o.contains(f)).collect(),
            None => mine,
        }
    }

    /// What `target` grants: its capabilities and the conditions that hold in this run.
    pub fn granted(&self, target: &str, conditions: &[&str]) -> BTreeSet<String> {
        let caps = self.plan.capabilities(target).unwrap_or_else(|e| stop(e));
        for c in conditions {
            if !self.plan.conditions.contains_key(*c) {
                stop(format!(
                    "the runner grants {c:?}, which [conditions] does not declare"
                ));
            }
        }
        caps.iter()
            .cloned()
            .chain(conditions.iter().map(|c| (*c).to_owned()))
            .collect()
    }
}

/// The scenarios of a feature, those in rules included.
fn scenarios(feature: &gherkin::Feature) -> Vec<&gherkin::Scenario> {
    feature
        .scenarios
        .iter()
        .chain(feature.rules.iter().flat_map(|r| r.scenarios.iter()))
        .collect()
}

/// The `Given` steps a scenario runs: its feature's Background first, then its own.
pub fn given_steps(feature: &gherkin::Feature, scenario: &gherkin::Scenario) -> Vec<String> {
    feature
        .background
        .iter()
        .flat_map(|b| b.steps.iter())
        .chain(scenario.steps.iter())
        .filter(|s| s.ty == gherkin::StepType::Given)
        .map(|s| s.value.clone())
        .collect()
}

/// How one scenario ended, for the report.
#[derive(Clone)]
pub enum Outcome {
    Passed,
    Failed,
    /// Skipped with the declared reason.
    Declared(String),
    /// Skipped with nothing declared: a failure.
    Undeclared,
}

/// `(target, feature, scenario, outcome)` of every scenario of the run so far.
static OUTCOMES: Mutex<Vec<(String, String, String, Outcome)>> = Mutex::new(Vec::new());

pub fn record(target: &str, feature: &str, scenario: &str, outcome: Outcome) {
    OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).push((
        target.into(),
        feature.into(),
        scenario.into(),
        outcome,
    ));
}

/// Prints `target`'s scenarios passed, failed and skipped, each skip with its reason.
pub fn report(target: &str) {
    let all = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mine: Vec<_> = all.iter().filter(|(t, ..)| t == target).collect();
    let count = |f: fn(&Outcome) -> bool| mine.iter().filter(|(_, _, _, o)| f(o)).count();
    println!(
        "=== conformance: {target}: {} passed, {} failed, {} skipped as declared, {} skipped undeclared (failed) ===",
        count(|o| matches!(o, Outcome::Passed)),
        count(|o| matches!(o, Outcome::Failed)),
        count(|o| matches!(o, Outcome::Declared(_))),
        count(|o| matches!(o, Outcome::Undeclared)),
    );
    for (_, feature, scenario, outcome) in &mine {
        match outcome {
            Outcome::Declared(why) => println!("  skipped: {feature}: {scenario}: {why}"),
            Outcome::Undeclared => println!(
                "  UNDECLARED SKIP: {feature}: {scenario}: a step matched no step definition"
            ),
            _ => {}
        }
    }
}
