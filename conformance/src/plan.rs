//! What the conformance suite runs where (`conformance/plan.toml`): each target's capabilities,
//! the conditions of a run, and the runs of `make test` with their features; how a scenario's
//! skip is judged declared (a gate it names that the target or run lacks) or not; the table of
//! docs/testbed.md generated from it. Pure: the runner reads files and feature steps and asks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

/// What went wrong reading or applying the plan.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("failed to read the conformance plan {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("failed to parse the conformance plan: {0}")]
    Parse(String),
    #[error("{list} names unknown features {unknown:?}; the features are: {}", known.join(", "))]
    UnknownFeatures {
        list: String,
        unknown: Vec<String>,
        known: Vec<String>,
    },
    #[error("unknown conformance target {target:?}; the plan declares: {}", known.join(", "))]
    UnknownTarget { target: String, known: Vec<String> },
    #[error("unknown CONFORMANCE_RUN {run:?}; the plan declares: {}", known.join(", "))]
    UnknownRun { run: String, known: Vec<String> },
    #[error("run {run:?} has no target {target:?}; its targets: {}", targets.join(", "))]
    NotInRun {
        run: String,
        target: String,
        targets: Vec<String>,
    },
    #[error(
        "{feature}: step \"Given {step}\" names a capability that no target declares \
         (conformance/plan.toml: a target's capabilities, or [unclaimed])"
    )]
    UnknownCapability { feature: String, step: String },
}

/// One provider under test.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub about: String,
    pub capabilities: Vec<String>,
}

/// One run of `make test` (`CONFORMANCE_RUN`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub order: u32,
    #[serde(rename = "where")]
    pub place: String,
    pub targets: Vec<String>,
    /// Every target's features; all when absent.
    pub features: Option<Vec<String>>,
    #[serde(default)]
    pub more: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub leave_out: BTreeMap<String, Vec<String>>,
    pub why: String,
}

/// The whole declaration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub targets: BTreeMap<String, Target>,
    #[serde(default)]
    pub unclaimed: BTreeMap<String, String>,
    #[serde(default)]
    pub conditions: BTreeMap<String, String>,
    pub runs: BTreeMap<String, Run>,
}

/// What a `Given` step gates on, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// A capability key as targets list it ("fault injection", "does not support exec").
    Capability(String),
    /// A condition sentence of `[conditions]`.
    Condition(String),
}

impl Gate {
    /// The key granted sets hold.
    pub fn key(&self) -> &str {
        match self {
            Self::Capability(k) | Self::Condition(k) => k,
        }
    }
}

/// The capability a `Given` sentence names, whether or not any target has it.
pub fn capability_of(sentence: &str) -> Option<String> {
    let rest = sentence.strip_prefix("the provider ")?;
    if let Some(what) = rest.strip_prefix("supports ") {
        return Some(what.to_owned());
    }
    if rest.starts_with("does not support ") || rest.starts_with("runs ") {
        return Some(rest.to_owned());
    }
    None
}

/// The `Given` sentence that names capability `cap` (the inverse of [`capability_of`]).
pub fn sentence_of(cap: &str) -> String {
    if cap.starts_with("does not support ") || cap.starts_with("runs ") {
        format!("the provider {cap}")
    } else {
        format!("the provider supports {cap}")
    }
}

impl Plan {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|e| PlanError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Self, PlanError> {
        toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))
    }

    fn target_names(&self) -> Vec<String> {
        self.targets.keys().cloned().collect()
    }

    /// `target`'s capabilities.
    pub fn capabilities(&self, target: &str) -> Result<&[String], PlanError> {
        self.targets
            .get(target)
            .map(|t| t.capabilities.as_slice())
            .ok_or_else(|| PlanError::UnknownTarget {
                target: target.to_owned(),
                known: self.target_names(),
            })
    }

    /// Every capability some target has or `[unclaimed]` names.
    fn vocabulary(&self) -> BTreeSet<&str> {
        self.targets
            .values()
            .flat_map(|t| t.capabilities.iter().map(String::as_str))
            .chain(self.unclaimed.keys().map(String::as_str))
            .collect()
    }

    /// What the `Given` sentence gates on: a capability (known or not: see
    /// [`Self::check_steps`]) or a condition of the run.
    pub fn gate(&self, sentence: &str) -> Option<Gate> {
        if self.conditions.contains_key(sentence) {
            return Some(Gate::Condition(sentence.to_owned()));
        }
        capability_of(sentence).map(Gate::Capability)
    }

    /// Fails on a `Given` step of `feature` naming a capability nobody declares (a typo, or a
    /// capability added to a feature and not to the plan).
    pub fn check_steps<'a>(
        &self,
        feature: &str,
        given: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), PlanError> {
        let vocabulary = self.vocabulary();
        for step in given {
            if let Some(Gate::Capability(cap)) = self.gate(step)
                && !vocabulary.contains(cap.as_str())
            {
                return Err(PlanError::UnknownCapability {
                    feature: feature.to_owned(),
                    step: step.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Why a scenario with these `Given` steps does not run where `granted` holds: the first
    /// gate not granted. `None`: nothing declared keeps it from running, so a skip is a failure.
    pub fn skip_reason<'a>(
        &self,
        given: impl IntoIterator<Item = &'a str>,
        granted: &BTreeSet<String>,
    ) -> Option<String> {
        given.into_iter().find_map(|step| {
            let gate = self.gate(step)?;
            if granted.contains(gate.key()) {
                return None;
            }
            Some(match gate {
                Gate::Capability(cap) => format!("the target lacks \"{cap}\""),
                Gate::Condition(c) => format!("not \"{c}\": {}", self.conditions[&c]),
            })
        })
    }

    /// Fails unless every feature this plan names is in `known`, and every run's targets are
    /// declared targets.
    pub fn check(&self, known: &[String]) -> Result<(), PlanError> {
        for (name, run) in &self.runs {
            for t in run
                .targets
                .iter()
                .chain(run.more.keys())
                .chain(run.leave_out.keys())
            {
                self.capabilities(t)?;
                if !run.targets.contains(t) {
                    return Err(PlanError::NotInRun {
                        run: name.clone(),
                        target: t.clone(),
                        targets: run.targets.clone(),
                    });
                }
            }
            let lists = run
                .features
                .iter()
                .chain(run.more.values())
                .chain(run.leave_out.values());
            for list in lists {
                check_features(&format!("conformance/plan.toml, run {name}"), list, known)?;
            }
        }
        Ok(())
    }

    /// The features `target` runs in `run` (every known one without a run).
    pub fn features(
        &self,
        run: Option<&str>,
        target: &str,
        known: &[String],
    ) -> Result<Vec<String>, PlanError> {
        self.capabilities(target)?;
        let Some(name) = run else {
            return Ok(known.to_vec());
        };
        let r = self.run(name)?;
        if !r.targets.iter().any(|t| t == target) {
            return Err(PlanError::NotInRun {
                run: name.to_owned(),
                target: target.to_owned(),
                targets: r.targets.clone(),
            });
        }
        let base = r.features.clone().unwrap_or_else(|| known.to_vec());
        let more = r.more.get(target).cloned().unwrap_or_default();
        let out = r.leave_out.get(target).cloned().unwrap_or_default();
        let mut all: Vec<String> = base.into_iter().chain(more).collect();
        all.retain(|f| !out.contains(f));
        all.sort();
        all.dedup();
        Ok(all)
    }

    /// The run named `name`.
    pub fn run(&self, name: &str) -> Result<&Run, PlanError> {
        self.runs.get(name).ok_or_else(|| PlanError::UnknownRun {
            run: name.to_owned(),
            known: self.runs.keys().cloned().collect(),
        })
    }
}

/// Fails unless every name of `list` (called `what` in the error) is a known feature.
pub fn check_features(what: &str, list: &[String], known: &[String]) -> Result<(), PlanError> {
    let unknown: Vec<String> = list
        .iter()
        .filter(|f| !known.contains(f))
        .cloned()
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(PlanError::UnknownFeatures {
        list: what.to_owned(),
        unknown,
        known: known.to_vec(),
    })
}

/// The features of a folder: the stems of its `*.feature` files, sorted.
pub fn features_in(dir: &Path) -> Result<Vec<String>, PlanError> {
    let entries = std::fs::read_dir(dir).map_err(|e| PlanError::Read {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "feature"))
        .filter_map(|p| p.file_stem()?.to_str().map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

/// A comma-separated list, trimmed, empty entries dropped.
pub fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|f| f.trim().to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

#[path = "plan/docs.rs"]
pub mod docs;

#[cfg(test)]
#[path = "plan/tests.rs"]
mod tests;
