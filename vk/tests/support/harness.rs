//! The cluster-test harness lives in the conformance crate, shared with the Cucumber suite.
#![allow(unused_imports)]

pub use conformance::harness::*;
