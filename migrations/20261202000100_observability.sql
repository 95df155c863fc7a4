-- The event stream's consumers: task logs (log sink), alert rules, channels,
-- alerts and their notifications (monitor), and the monthly health reports.
-- Same dialect as the init migration: MySQL 8.0 and MariaDB 10.11 alike, JSON kept
-- in LONGTEXT, times in UTC DATETIME(6).

-- What the monitor and the health report ask of instances: a task's latest
-- finished runs, a task's newest firing, and everything about one trace id.
CREATE INDEX ix_instances_task_finished ON instances (task_name, finished_at);
CREATE INDEX ix_instances_task_created ON instances (task_name, created_at);
CREATE INDEX ix_instances_trace ON instances (trace_id);

-- Task log lines (seed 5.5), written in batches by the log sink. A line is
-- identified by (instance, attempt, worker, seq), so a redelivered batch is stored
-- once; an instance's log reads in (attempt, ts, seq) order. Retention deletes by ts.
CREATE TABLE instance_logs (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    instance_id  CHAR(30)         NOT NULL,
    attempt      INT UNSIGNED     NOT NULL,
    worker_id    VARCHAR(128)     NOT NULL,
    seq          BIGINT UNSIGNED  NOT NULL,
    task_name    VARCHAR(64)      NOT NULL,
    trace_id     CHAR(30)         NOT NULL,
    level        VARCHAR(8)       NOT NULL,
    stream       VARCHAR(8)       NOT NULL,
    message      MEDIUMTEXT       NOT NULL,
    ts           DATETIME(6)      NOT NULL,
    received_at  DATETIME(6)      NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_logs_line (instance_id, attempt, worker_id, seq),
    KEY ix_logs_order (instance_id, attempt, ts, seq),
    KEY ix_logs_ts (ts)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Alert rules, as their canonical JSON (ax_domain::alert::AlertRule).
CREATE TABLE alert_rules (
    name        VARCHAR(64)  NOT NULL,
    definition  LONGTEXT     NOT NULL,
    created_at  DATETIME(6)  NOT NULL,
    updated_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Webhooks, as their canonical JSON (ax_domain::alert::AlertChannel).
CREATE TABLE alert_channels (
    name        VARCHAR(64)  NOT NULL,
    definition  LONGTEXT     NOT NULL,
    created_at  DATETIME(6)  NOT NULL,
    updated_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per alert: a condition (rule + task, the fingerprint) from firing to
-- resolved. open_fingerprint equals fingerprint while firing and is NULL after, so
-- its unique key allows one open alert per condition however many monitors judge
-- it. notified_at is set when the firing was notified; an alert opened within
-- the rule's silence window of the last notified one is recorded but silenced.
CREATE TABLE alerts (
    id                CHAR(30)       NOT NULL,
    rule_name         VARCHAR(64)    NOT NULL,
    kind              VARCHAR(32)    NOT NULL,
    level             CHAR(2)        NOT NULL,
    fingerprint       VARCHAR(200)   NOT NULL,
    open_fingerprint  VARCHAR(200)   NULL,
    task_name         VARCHAR(64)    NULL,
    owner             VARCHAR(128)   NULL,
    instance_id       CHAR(30)       NULL,
    trace_id          CHAR(30)       NULL,
    status            VARCHAR(10)    NOT NULL,
    summary           VARCHAR(1024)  NOT NULL,
    details           LONGTEXT       NOT NULL,
    occurrences       INT UNSIGNED   NOT NULL,
    silenced          TINYINT(1)     NOT NULL DEFAULT 0,
    fired_at          DATETIME(6)    NOT NULL,
    last_seen_at      DATETIME(6)    NOT NULL,
    resolved_at       DATETIME(6)    NULL,
    notified_at       DATETIME(6)    NULL,
    acknowledged_at   DATETIME(6)    NULL,
    acknowledged_by   VARCHAR(128)   NULL,
    ack_comment       VARCHAR(1024)  NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_alerts_open (open_fingerprint),
    KEY ix_alerts_fingerprint (fingerprint, fired_at),
    KEY ix_alerts_status (status, fired_at),
    KEY ix_alerts_task (task_name, fired_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Webhook deliveries: written in the transaction that decided them, delivered by
-- any monitor (claimed with SKIP LOCKED), retried with back-off until sent or out
-- of attempts. kind: firing, resolved, reminder, report, test.
CREATE TABLE alert_notifications (
    id               BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    alert_id         CHAR(30)         NULL,
    report_id        CHAR(30)         NULL,
    channel          VARCHAR(64)      NOT NULL,
    kind             VARCHAR(10)      NOT NULL,
    status           VARCHAR(8)       NOT NULL,
    attempts         INT UNSIGNED     NOT NULL DEFAULT 0,
    next_attempt_at  DATETIME(6)      NOT NULL,
    last_error       VARCHAR(1024)    NULL,
    created_at       DATETIME(6)      NOT NULL,
    sent_at          DATETIME(6)      NULL,
    PRIMARY KEY (id),
    KEY ix_notifications_due (status, next_attempt_at),
    KEY ix_notifications_alert (alert_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Task health reports (seed 6). scheduled_for is the cron fire a monthly report
-- answers; unique, so of several monitors one makes it. Reports asked for by hand
-- are not stored.
CREATE TABLE health_reports (
    id             CHAR(30)     NOT NULL,
    scheduled_for  DATETIME(6)  NOT NULL,
    since          DATETIME(6)  NOT NULL,
    until          DATETIME(6)  NOT NULL,
    tasks_total    INT UNSIGNED NOT NULL,
    tasks_flagged  INT UNSIGNED NOT NULL,
    report         LONGTEXT     NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_health_reports_fire (scheduled_for)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The rules of seed 5.4, on from the start; they notify once a channel exists.
INSERT INTO alert_rules (name, definition, created_at, updated_at) VALUES
('task-failing',
 '{"name":"task-failing","kind":"consecutive_failures","level":"P1","threshold":3.0,"window_sec":0,"min_samples":0,"silence_sec":1800,"channels":[],"enabled":true,"description":"A task failed 3 times in a row"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)),
('timeouts',
 '{"name":"timeouts","kind":"timeout_rate","level":"P1","threshold":0.2,"window_sec":900,"min_samples":5,"silence_sec":1800,"channels":[],"enabled":true,"description":"More than 20% of a task''s attempts timed out in 15 minutes"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)),
('mass-failure',
 '{"name":"mass-failure","kind":"failure_rate","level":"P0","threshold":0.5,"window_sec":600,"min_samples":20,"silence_sec":1800,"channels":[],"enabled":true,"description":"Half of all instances finished in 10 minutes failed"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)),
('workers-lost',
 '{"name":"workers-lost","kind":"workers_lost","level":"P0","threshold":1.0,"window_sec":0,"min_samples":0,"silence_sec":1800,"channels":[],"enabled":true,"description":"Every worker is lost"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)),
('backlog',
 '{"name":"backlog","kind":"backlog","level":"P2","threshold":1.0,"window_sec":300,"min_samples":0,"silence_sec":1800,"channels":[],"enabled":true,"description":"Instances ready to run for more than 5 minutes"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)),
('slow-runs',
 '{"name":"slow-runs","kind":"duration_outlier","level":"P2","threshold":3.0,"window_sec":0,"min_samples":20,"silence_sec":1800,"channels":[],"enabled":true,"description":"A run took 3 times the task''s p95"}',
 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6));
