//! Metric names of the log sink, declared once.

pub const BATCHES: &str = "ax_log_sink_batches_total";
pub const LINES: &str = "ax_log_sink_lines_total";
pub const DUPLICATE_LINES: &str = "ax_log_sink_duplicate_lines_total";
pub const REFUSED: &str = "ax_log_sink_refused_total";
pub const WRITE_SECONDS: &str = "ax_log_sink_write_seconds";
pub const DELAY_SECONDS: &str = "ax_log_sink_delay_seconds";
pub const RETENTION_DELETED: &str = "ax_log_sink_retention_deleted_total";
pub const FAILURES: &str = "ax_log_sink_failures_total";

pub fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(BATCHES, "Log batches stored in MySQL");
    describe_counter!(LINES, "Log lines stored in MySQL");
    describe_counter!(DUPLICATE_LINES, "Log lines received again (redelivery) and skipped");
    describe_counter!(REFUSED, "Log messages acknowledged without storing them, by reason");
    describe_histogram!(WRITE_SECONDS, Unit::Seconds, "Writing one pull of log batches to MySQL");
    describe_histogram!(DELAY_SECONDS, Unit::Seconds, "From a batch's first line being logged to it being stored");
    describe_counter!(RETENTION_DELETED, "Log lines deleted by retention");
    describe_counter!(FAILURES, "Failed passes of a log sink loop, by loop");
}
