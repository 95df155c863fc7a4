//! What every AX process shares at start-up: configuration, telemetry and shutdown.
//!
//! # Layout
//! - [`config`]: the typed configuration (clap blocks with `AX_…` env vars and an
//!   optional TOML file), validated before anything connects
//! - [`telemetry`]: tracing subscriber and the Prometheus recorder
//! - [`shutdown`]: one root cancellation token driven by SIGINT/SIGTERM
//! - [`observe`]: settings of the monitor, the log sink and the worker's log shipper
//! - [`process`]: the standard `process_*` metrics, read from `/proc`
//! - [`metrics_server`]: `/metrics` and `/healthz` for services without the api
//! - [`supervise`]: a service's components stop together when one fails

pub mod config;
pub mod metrics_server;
pub mod observe;
pub mod process;
pub mod shutdown;
pub mod supervise;
pub mod telemetry;

pub use config::Config;
