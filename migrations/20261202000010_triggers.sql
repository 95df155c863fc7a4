-- Leadership, cron schedules, chain edges.

-- One row: the current leadership term. A scheduler that wins the MySQL GET_LOCK
-- bumps the epoch; every leader write checks it under a shared lock, so a paused
-- ex-leader that wakes up cannot commit anything (its epoch is stale).
CREATE TABLE scheduler_leader (
    id           TINYINT UNSIGNED  NOT NULL,
    epoch        BIGINT UNSIGNED   NOT NULL,
    holder       VARCHAR(160)      NOT NULL,
    acquired_at  DATETIME(6)       NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT INTO scheduler_leader (id, epoch, holder, acquired_at) VALUES (1, 0, '', '1970-01-01 00:00:00');

-- The authoritative next fire of every cron trigger. It advances only in the
-- transaction that creates the fire's instance, so nothing planned into Redis can be
-- lost: after a flush or a failover the planner plans again from here.
CREATE TABLE cron_schedules (
    task_id        CHAR(30)          NOT NULL,
    trigger_index  SMALLINT UNSIGNED NOT NULL,
    task_name      VARCHAR(64)       NOT NULL,
    task_version   INT UNSIGNED      NOT NULL,
    expression     VARCHAR(255)      NOT NULL,
    timezone       VARCHAR(64)       NOT NULL,
    next_fire_at   DATETIME(6)       NOT NULL,
    updated_at     DATETIME(6)       NOT NULL,
    PRIMARY KEY (task_id, trigger_index),
    KEY ix_cron_next (next_fire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Which tasks fire when another task's instance ends (chain triggers), kept with
-- the definitions so the chain service and cycle checks need no scan of all tasks.
CREATE TABLE chain_edges (
    upstream_name    VARCHAR(64)   NOT NULL,
    downstream_id    CHAR(30)      NOT NULL,
    downstream_name  VARCHAR(64)   NOT NULL,
    trigger_index    SMALLINT UNSIGNED NOT NULL,
    on_state         VARCHAR(16)   NOT NULL,
    PRIMARY KEY (upstream_name, downstream_id, trigger_index),
    KEY ix_chain_downstream (downstream_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Named rows to serialize rare global changes on (the chain graph).
CREATE TABLE store_locks (
    name  VARCHAR(64)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT INTO store_locks (name) VALUES ('chain_graph');
