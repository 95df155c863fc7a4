//! Logs and metrics set up once per process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogConfig;

/// Installs the tracing subscriber. Calling it twice is harmless (tests do).
pub fn init_tracing(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(true);
    let _ = if config.log_format == "json" { builder.json().try_init() } else { builder.try_init() };
}

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process-wide Prometheus recorder; installed on first use, so every service
/// in one process (as under `ax dev`) shares it.
pub fn prometheus() -> PrometheusHandle {
    PROMETHEUS
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding several
            // services); the handle then simply renders nothing of ours.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
