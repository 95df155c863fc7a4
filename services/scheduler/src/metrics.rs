//! Metric names of the scheduler, declared once.

pub const TRIGGERS_RECEIVED: &str = "ax_intake_triggers_total";
pub const TRIGGERS_REFUSED: &str = "ax_intake_triggers_refused_total";
pub const TRIGGERS_DUPLICATE: &str = "ax_intake_triggers_duplicate_total";
pub const INSTANCES_CREATED: &str = "ax_instances_created_total";
pub const SCHEDULE_DELAY: &str = "ax_schedule_delay_seconds";
pub const DISPATCHED: &str = "ax_dispatch_instances_total";
pub const DISPATCH_NO_WORKER: &str = "ax_dispatch_no_worker_total";
pub const DISPATCH_PASS: &str = "ax_dispatch_pass_seconds";
pub const REPORTS: &str = "ax_reports_total";
pub const REPORTS_REJECTED: &str = "ax_reports_rejected_total";
pub const TRANSITION_BATCH: &str = "ax_transition_batch_size";
pub const EVENTS_PUBLISHED: &str = "ax_relay_events_published_total";
pub const RELAY_FAILURES: &str = "ax_relay_failures_total";
pub const WORKERS_ALIVE: &str = "ax_workers_alive";
pub const LOOP_FAILURES: &str = "ax_scheduler_loop_failures_total";
pub const IS_LEADER: &str = "ax_scheduler_is_leader";
pub const LEADER_EPOCH: &str = "ax_scheduler_leader_epoch";
pub const CRON_FIRES: &str = "ax_cron_fires_total";
pub const CRON_MISFIRES: &str = "ax_cron_misfires_total";
pub const CRON_FIRE_SKEW: &str = "ax_cron_fire_skew_seconds";
pub const FENCED_WRITES: &str = "ax_scheduler_fenced_writes_total";
pub const DUE_INDEX_SIZE: &str = "ax_due_index_entries";
pub const RETRIES_DEFERRED: &str = "ax_retries_deferred_total";
pub const LEASES_EXPIRED: &str = "ax_lease_expiries_total";
pub const TIMEOUTS: &str = "ax_timeouts_total";
pub const REDIS_REBUILDS: &str = "ax_redis_rebuilds_total";

pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(TRIGGERS_RECEIVED, "Trigger messages taken from AX_TRIGGERS");
    describe_counter!(TRIGGERS_REFUSED, "Trigger messages acknowledged without an instance, by reason");
    describe_counter!(TRIGGERS_DUPLICATE, "Trigger messages whose trigger id had already made its instance (upstream retries, redeliveries)");
    describe_counter!(INSTANCES_CREATED, "Instances created, by task and trigger type");
    describe_histogram!(SCHEDULE_DELAY, Unit::Seconds, "From trigger publish to instance committed");
    describe_counter!(DISPATCHED, "Instances dispatched to a worker, by task");
    describe_histogram!(DISPATCH_PASS, Unit::Seconds, "One dispatch pass that found due instances: reads, worker choice, the commit and the Redis push");
    describe_counter!(DISPATCH_NO_WORKER, "Due instances left waiting because no worker was eligible, by task");
    describe_counter!(REPORTS, "Worker reports, by outcome");
    describe_counter!(REPORTS_REJECTED, "Worker reports refused by the guarded transition, by reason");
    describe_histogram!(TRANSITION_BATCH, "Transitions committed per MySQL transaction");
    describe_counter!(EVENTS_PUBLISHED, "Events the outbox relay published and JetStream acknowledged");
    describe_counter!(RELAY_FAILURES, "Outbox relay passes that failed");
    describe_gauge!(WORKERS_ALIVE, "Workers whose last heartbeat is younger than the lease");
    describe_counter!(LOOP_FAILURES, "Failed passes of a scheduler loop, by loop");
    describe_gauge!(IS_LEADER, "1 while this scheduler leads");
    describe_gauge!(LEADER_EPOCH, "The leadership term this scheduler last held");
    describe_counter!(CRON_FIRES, "Cron fires that created an instance");
    describe_counter!(CRON_MISFIRES, "Missed cron fires handled by the misfire policy, by task and policy");
    describe_histogram!(CRON_FIRE_SKEW, Unit::Seconds, "From a cron fire's time to its instance ready to dispatch: committed, or, created ahead, woken by the timer");
    describe_counter!(FENCED_WRITES, "Leader writes refused because a newer term began");
    describe_gauge!(DUE_INDEX_SIZE, "Entries in the Redis due index");
    describe_counter!(RETRIES_DEFERRED, "Retries pushed later by the retry budget, by task and scope");
    describe_counter!(LEASES_EXPIRED, "Attempts ended because their worker's lease expired, by task");
    describe_counter!(TIMEOUTS, "Attempts ended by the scheduler after timeout plus grace, by task");
    describe_counter!(REDIS_REBUILDS, "Times the leader found Redis emptied and rebuilt queues from MySQL");
}

pub fn leader(leading: bool, epoch: u64) {
    metrics::gauge!(IS_LEADER).set(if leading { 1.0 } else { 0.0 });
    metrics::gauge!(LEADER_EPOCH).set(epoch as f64);
}
