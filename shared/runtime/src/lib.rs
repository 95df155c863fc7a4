//! What every AX process shares at start-up: configuration, telemetry and shutdown.
//!
//! # Layout
//! - [`config`]: the typed configuration (clap blocks with `AX_…` env vars and an
//!   optional TOML file), validated before anything connects
//! - [`telemetry`]: tracing subscriber and the Prometheus recorder
//! - [`shutdown`]: one root cancellation token driven by SIGINT/SIGTERM

pub mod config;
pub mod shutdown;
pub mod telemetry;

pub use config::Config;
