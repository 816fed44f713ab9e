//! Emulators of real GPU provider HTTP APIs.
