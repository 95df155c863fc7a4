-- AX's MySQL projection. Written in the dialect MySQL 8.0 and MariaDB 10.11 share:
-- no JSON column type (MariaDB aliases it to LONGTEXT anyway), no CHECK reliance,
-- DATETIME(6) in UTC everywhere.

-- A registered task; `version` grows by one on every update (seed 2.2: updates
-- take this row's lock, so concurrent registrations never lose one).
CREATE TABLE tasks (
    id          CHAR(30)      NOT NULL,
    name        VARCHAR(64)   NOT NULL,
    version     INT UNSIGNED  NOT NULL,
    enabled     TINYINT(1)    NOT NULL DEFAULT 1,
    owner       VARCHAR(128)  NOT NULL,
    definition  LONGTEXT      NOT NULL,
    created_at  DATETIME(6)   NOT NULL,
    updated_at  DATETIME(6)   NOT NULL,
    deleted_at  DATETIME(6)   NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_tasks_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Every definition a task ever had, so an instance can say what it ran with.
CREATE TABLE task_versions (
    task_id     CHAR(30)      NOT NULL,
    version     INT UNSIGNED  NOT NULL,
    definition  LONGTEXT      NOT NULL,
    operator    VARCHAR(128)  NOT NULL,
    created_at  DATETIME(6)   NOT NULL,
    PRIMARY KEY (task_id, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One firing of a task. The primary key includes created_at so the table can be
-- partitioned by month later (MySQL requires every unique key to contain the
-- partitioning column); the trigger-id uniqueness therefore lives in
-- instance_triggers, which is not partitioned.
CREATE TABLE instances (
    id               CHAR(30)          NOT NULL,
    created_at       DATETIME(6)       NOT NULL,
    task_id          CHAR(30)          NOT NULL,
    task_name        VARCHAR(64)       NOT NULL,
    task_version     INT UNSIGNED      NOT NULL,
    state            VARCHAR(16)       NOT NULL,
    attempt          INT UNSIGNED      NOT NULL,
    seq              INT UNSIGNED      NOT NULL,  -- sequence number of the last event
    trigger_type     VARCHAR(16)       NOT NULL,
    trigger_id       VARCHAR(128)      NOT NULL,
    trace_id         CHAR(30)          NOT NULL,
    params           LONGTEXT          NOT NULL,
    payload_version  INT UNSIGNED      NULL,
    priority         TINYINT UNSIGNED  NOT NULL,
    due_at           DATETIME(6)       NOT NULL,  -- when CREATED may be dispatched, or RETRYING retried
    worker_id        VARCHAR(128)      NULL,
    lease_expires_at DATETIME(6)       NULL,
    started_at       DATETIME(6)       NULL,
    finished_at      DATETIME(6)       NULL,
    reason           VARCHAR(2048)     NOT NULL DEFAULT '',
    result           LONGTEXT          NULL,
    updated_at       DATETIME(6)       NOT NULL,
    PRIMARY KEY (id, created_at),
    KEY ix_instances_ready (state, priority, due_at),
    KEY ix_instances_task_state (task_id, state),
    KEY ix_instances_lease (state, lease_expires_at),
    KEY ix_instances_worker (worker_id, state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Invariant 2: one trigger id (a cron fire, a chain edge, an upstream id) creates
-- at most one instance of a task.
CREATE TABLE instance_triggers (
    task_id      CHAR(30)      NOT NULL,
    trigger_id   VARCHAR(128)  NOT NULL,
    instance_id  CHAR(30)      NOT NULL,
    created_at   DATETIME(6)   NOT NULL,
    PRIMARY KEY (task_id, trigger_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The audit trail (seed 6): one row per transition, never updated.
CREATE TABLE instance_transitions (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    instance_id  CHAR(30)         NOT NULL,
    seq          INT UNSIGNED     NOT NULL,
    event_id     CHAR(30)         NOT NULL,
    task_name    VARCHAR(64)      NOT NULL,
    attempt      INT UNSIGNED     NOT NULL,
    from_state   VARCHAR(16)      NULL,
    to_state     VARCHAR(16)      NOT NULL,
    operator     VARCHAR(160)     NOT NULL,
    reason       VARCHAR(2048)    NOT NULL,
    worker_id    VARCHAR(128)     NULL,
    created_at   DATETIME(6)      NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_transitions_instance_seq (instance_id, seq),
    KEY ix_transitions_task_time (task_name, created_at),
    KEY ix_transitions_time (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Events committed with their cause and not yet acknowledged by JetStream
-- (invariant 1). The relay publishes in id order and deletes what was acknowledged.
CREATE TABLE outbox (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    event_id     CHAR(30)         NOT NULL,
    subject      VARCHAR(255)     NOT NULL,
    task_name    VARCHAR(64)      NOT NULL,
    instance_id  CHAR(30)         NULL,
    state        VARCHAR(16)      NULL,
    payload      MEDIUMBLOB       NOT NULL,
    created_at   DATETIME(6)      NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
