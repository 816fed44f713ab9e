//! Provider adapters: one module per backend, each implementing [`crate::provider::Provider`].

pub mod rest;
pub mod runpod;
pub mod slurm;
pub mod vast;
