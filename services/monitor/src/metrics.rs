//! Metric names of the monitor, declared once. The eight metrics of seed 5.4 map
//! to these (and the dashboard under `deploy/grafana/` plots them):
//!
//! | seed 5.4 | metric |
//! |---|---|
//! | schedule delay | `ax_schedule_delay_seconds` (scheduler) and `ax_instance_pickup_delay_seconds` |
//! | dispatch success rate | `ax_dispatch_outcomes_total{outcome="started"}` / all |
//! | timeout rate | `ax_attempt_outcomes_total{outcome="timed_out"}` / all |
//! | backlog older than 5 minutes | `ax_backlog_instances`, `ax_backlog_oldest_seconds` |
//! | heartbeat loss rate | `ax_worker_heartbeats_lost_total` / `ax_worker_heartbeats_total` |
//! | retry rate | `ax_instance_retries_total` / `ax_instances_total` |
//! | lease expiries | `ax_attempt_outcomes_total{outcome="lease_expired"}` |
//! | worker pool use | `ax_worker_pool_utilization_ratio` |
//!
//! Labels are bounded: task names, states, outcomes, rule and channel names, and
//! worker ids (as many as the pool); never an instance id.

// ---- from events ----
pub const TRANSITIONS: &str = "ax_instance_transitions_total";
pub const INSTANCES: &str = "ax_instances_total";
pub const OUTCOMES: &str = "ax_instance_outcomes_total";
pub const RETRIES: &str = "ax_instance_retries_total";
pub const ATTEMPT_OUTCOMES: &str = "ax_attempt_outcomes_total";
pub const DISPATCH_OUTCOMES: &str = "ax_dispatch_outcomes_total";
pub const RUN_DURATION: &str = "ax_instance_run_duration_seconds";
pub const PICKUP_DELAY: &str = "ax_instance_pickup_delay_seconds";

// ---- gauges from MySQL, Redis and heartbeats ----
pub const INSTANCES_BY_STATE: &str = "ax_instances";
pub const BACKLOG: &str = "ax_backlog_instances";
pub const BACKLOG_OLDEST: &str = "ax_backlog_oldest_seconds";
pub const OUTBOX_PENDING: &str = "ax_outbox_pending_events";
pub const OUTBOX_LAG: &str = "ax_outbox_lag_seconds";
pub const QUEUE_DEPTH: &str = "ax_worker_queue_depth";
pub const POOL_WORKERS: &str = "ax_worker_pool_workers";
pub const POOL_RUNNING: &str = "ax_worker_pool_running";
pub const POOL_CAPACITY: &str = "ax_worker_pool_capacity";
pub const POOL_UTILIZATION: &str = "ax_worker_pool_utilization_ratio";
pub const HEARTBEATS: &str = "ax_worker_heartbeats_total";
pub const HEARTBEATS_LOST: &str = "ax_worker_heartbeats_lost_total";

// ---- alerting ----
pub const ALERTS_FIRED: &str = "ax_alerts_fired_total";
pub const ALERTS_SILENCED: &str = "ax_alerts_silenced_total";
pub const ALERTS_RESOLVED: &str = "ax_alerts_resolved_total";
pub const ALERTS_OPEN: &str = "ax_alerts_open";
pub const NOTIFICATIONS: &str = "ax_alert_notifications_total";
pub const NOTIFICATIONS_PENDING: &str = "ax_alert_notifications_pending";
pub const WEBHOOK_SECONDS: &str = "ax_alert_webhook_seconds";
pub const HEALTH_REPORTS: &str = "ax_health_reports_total";

// ---- the monitor itself ----
pub const EVENTS: &str = "ax_monitor_events_total";
pub const EVENTS_REFUSED: &str = "ax_monitor_events_refused_total";
pub const EVENT_LAG: &str = "ax_monitor_event_lag_seconds";
pub const LOOP_FAILURES: &str = "ax_monitor_loop_failures_total";

pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(TRANSITIONS, "Instance transitions seen on AX_EVENTS, by task, from and to state");
    describe_counter!(INSTANCES, "Instances created, by task");
    describe_counter!(OUTCOMES, "Instances finished, by task and final state");
    describe_counter!(RETRIES, "Attempts that failed and were scheduled again, by task");
    describe_counter!(ATTEMPT_OUTCOMES, "Attempts ended, by task and outcome (succeeded, failed, timed_out, lease_expired, handed_back, cancelled)");
    describe_counter!(DISPATCH_OUTCOMES, "Dispatches ended, by task and outcome (started, handed_back, lost, cancelled)");
    describe_histogram!(RUN_DURATION, Unit::Seconds, "How long attempts ran, RUNNING to their end, by task");
    describe_histogram!(PICKUP_DELAY, Unit::Seconds, "From DISPATCHED to RUNNING: how long a worker took to start, by task");
    describe_gauge!(INSTANCES_BY_STATE, "Unfinished instances, by task and state");
    describe_gauge!(BACKLOG, "Instances ready to run for more than 5 minutes, by task");
    describe_gauge!(BACKLOG_OLDEST, Unit::Seconds, "How long the oldest ready instance has waited");
    describe_gauge!(OUTBOX_PENDING, "Committed events not yet acknowledged by JetStream");
    describe_gauge!(OUTBOX_LAG, Unit::Seconds, "Age of the oldest event waiting in the outbox");
    describe_gauge!(QUEUE_DEPTH, "Assignments waiting in a worker's Redis queues, by worker");
    describe_gauge!(POOL_WORKERS, "Workers whose last heartbeat is younger than the lease");
    describe_gauge!(POOL_RUNNING, "Instances the live workers say they run");
    describe_gauge!(POOL_CAPACITY, "Instances the live workers may run at once");
    describe_gauge!(POOL_UTILIZATION, "Running / capacity over the live workers");
    describe_counter!(HEARTBEATS, "Worker heartbeats received");
    describe_counter!(HEARTBEATS_LOST, "Workers that went silent for a lease without saying goodbye");
    describe_counter!(ALERTS_FIRED, "Alerts opened and notified, by rule and level");
    describe_counter!(ALERTS_SILENCED, "Alerts opened inside their condition's silence window, by rule and level");
    describe_counter!(ALERTS_RESOLVED, "Alerts resolved, by rule and level");
    describe_gauge!(ALERTS_OPEN, "Open alerts, by level");
    describe_counter!(NOTIFICATIONS, "Webhook deliveries, by channel and result (sent, failed, gave_up)");
    describe_gauge!(NOTIFICATIONS_PENDING, "Webhook deliveries waiting to be sent or retried");
    describe_histogram!(WEBHOOK_SECONDS, Unit::Seconds, "One webhook call, by channel format");
    describe_counter!(HEALTH_REPORTS, "Task health reports made by the monthly run");
    describe_counter!(EVENTS, "Events consumed, by kind");
    describe_counter!(EVENTS_REFUSED, "Events acknowledged without processing because they cannot be decoded, by reason");
    describe_histogram!(EVENT_LAG, Unit::Seconds, "From an event's commit to the monitor processing it");
    describe_counter!(LOOP_FAILURES, "Failed passes of a monitor loop, by loop");
}
