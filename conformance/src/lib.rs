//! Conformance suite support: the cluster harness shared by the Cucumber steps and the VK's
//! own cluster tests.

pub mod harness;
pub mod plan;
