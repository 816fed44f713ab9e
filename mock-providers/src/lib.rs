//! Emulators of real GPU provider HTTP APIs (RunPod REST v2, Vast.ai) with a shared admin and
//! fault-injection API, for testing the virtual kubelet without a cloud account.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mock_providers::{EmulatorConfig, ExecutionMode, GpuStock, runpod, spawn};
//! let config = EmulatorConfig::new("test-key", vec![GpuStock::new("A100-80GB", 8, 1.89)])
//!     .with_mode(ExecutionMode::simulated(50, 50, None));
//! let (addr, _server) = spawn(runpod::router(runpod::State::new(config))).await?;
//! // RunPod base URL: format!("http://{addr}/v2"), admin API: format!("http://{addr}/_admin")
//! # let _ = addr; Ok(()) }
//! ```

// The large `json!` literals of the Vast offer and instance objects need a deeper macro limit.
#![recursion_limit = "512"]

pub mod admin;
pub mod config;
pub mod engine;
pub mod inventory;
pub mod runpod;
pub mod schema;
pub mod serve;
pub mod slurm;
pub mod util;
pub mod vast;

use std::net::SocketAddr;

pub use config::{EmulatorConfig, ExecutionMode, GpuStock, parse_gpus};

/// Serve `router` on an ephemeral port of 127.0.0.1; returns the address and the server task
/// (abort it to stop the server).
pub async fn spawn(
    router: axum::Router,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    spawn_on(
        "127.0.0.1:0".parse().map_err(std::io::Error::other)?,
        router,
    )
    .await
}

/// Serve `router` on `addr`; returns the bound address and the server task.
pub async fn spawn_on(
    addr: SocketAddr,
    router: axum::Router,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router).await {
            tracing::error!(error = %err, "emulator server stopped");
        }
    });
    Ok((local, handle))
}
