//! Metric names of the scheduler, declared once.

pub const TRIGGERS_RECEIVED: &str = "ax_intake_triggers_total";
pub const TRIGGERS_REFUSED: &str = "ax_intake_triggers_refused_total";
pub const INSTANCES_CREATED: &str = "ax_instances_created_total";
pub const SCHEDULE_DELAY: &str = "ax_schedule_delay_seconds";
pub const DISPATCHED: &str = "ax_dispatch_instances_total";
pub const DISPATCH_NO_WORKER: &str = "ax_dispatch_no_worker_total";
pub const REPORTS: &str = "ax_reports_total";
pub const REPORTS_REJECTED: &str = "ax_reports_rejected_total";
pub const TRANSITION_BATCH: &str = "ax_transition_batch_size";
pub const EVENTS_PUBLISHED: &str = "ax_relay_events_published_total";
pub const RELAY_FAILURES: &str = "ax_relay_failures_total";
pub const WORKERS_ALIVE: &str = "ax_workers_alive";
pub const LOOP_FAILURES: &str = "ax_scheduler_loop_failures_total";

pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(TRIGGERS_RECEIVED, "Trigger messages taken from AX_TRIGGERS");
    describe_counter!(TRIGGERS_REFUSED, "Trigger messages acknowledged without an instance, by reason");
    describe_counter!(INSTANCES_CREATED, "Instances created, by task and trigger type");
    describe_histogram!(SCHEDULE_DELAY, Unit::Seconds, "From trigger publish to instance committed");
    describe_counter!(DISPATCHED, "Instances dispatched to a worker, by task");
    describe_counter!(DISPATCH_NO_WORKER, "Due instances left waiting because no worker was eligible, by task");
    describe_counter!(REPORTS, "Worker reports, by outcome");
    describe_counter!(REPORTS_REJECTED, "Worker reports refused by the guarded transition, by reason");
    describe_histogram!(TRANSITION_BATCH, "Transitions committed per MySQL transaction");
    describe_counter!(EVENTS_PUBLISHED, "Events the outbox relay published and JetStream acknowledged");
    describe_counter!(RELAY_FAILURES, "Outbox relay passes that failed");
    describe_gauge!(WORKERS_ALIVE, "Workers whose last heartbeat is younger than the lease");
    describe_counter!(LOOP_FAILURES, "Failed passes of a scheduler loop, by loop");
}
