//! Cucumber conformance suite support library.
