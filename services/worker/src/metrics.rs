//! Metric names of the worker SDK, declared once.

pub const LOG_LINES: &str = "ax_worker_log_lines_total";
pub const LOG_LINES_DROPPED: &str = "ax_worker_log_lines_dropped_total";
pub const LOG_BATCHES: &str = "ax_worker_log_batches_total";
pub const LOG_PUBLISH_FAILURES: &str = "ax_worker_log_publish_failures_total";
pub const LOG_PUBLISH_SECONDS: &str = "ax_worker_log_publish_seconds";

pub fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(LOG_LINES, "Task log lines published to AX_LOGS and acknowledged");
    describe_counter!(LOG_LINES_DROPPED, "Task log lines dropped because the worker's log buffer was full or shutdown came first");
    describe_counter!(LOG_BATCHES, "Task log batches published to AX_LOGS and acknowledged");
    describe_counter!(LOG_PUBLISH_FAILURES, "Failed tries to publish a task log batch (each is retried)");
    describe_histogram!(LOG_PUBLISH_SECONDS, Unit::Seconds, "Publishing one task log batch, until JetStream acknowledged it");
}
