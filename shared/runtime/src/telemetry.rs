//! Logs and metrics set up once per process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogConfig;

/// Installs the tracing subscriber. Calling it twice is harmless (tests do).
pub fn init_tracing(config: &LogConfig) {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    // stderr, so a command's output on stdout stays clean for pipes (`ax audit replay | jq`).
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(true).with_writer(std::io::stderr);
    let _ = if config.log_format == "json" { builder.json().try_init() } else { builder.try_init() };
}

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Buckets of every `*_seconds` histogram: from a few milliseconds (dispatch,
/// webhook calls) to an hour (long batch runs).
const SECONDS_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

/// Cron fire skew is judged in milliseconds (50 ms at p99 is the bar), finer
/// than [`SECONDS_BUCKETS`] tell.
const FIRE_SKEW_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The process-wide Prometheus recorder; installed on first use, so every service
/// in one process (as under `ax dev`) shares it.
pub fn prometheus() -> PrometheusHandle {
    PROMETHEUS
        .get_or_init(|| {
            // Durations are histograms (aggregatable across replicas, unlike summaries).
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .expect("the bucket list is not empty")
                // A full name wins over a suffix (the exporter tries matchers in that order).
                .set_buckets_for_metric(Matcher::Full("ax_cron_fire_skew_seconds".into()), FIRE_SKEW_BUCKETS)
                .expect("the bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding several
            // services); the handle then simply renders nothing of ours.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
