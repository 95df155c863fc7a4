-- Execution: attempt deadlines, progress, reruns.

-- When a RUNNING attempt must have finished (start + the task's timeout); past it
-- and a grace period, the scheduler fails or retries the attempt itself.
ALTER TABLE instances ADD COLUMN deadline_at DATETIME(6) NULL AFTER lease_expires_at;
-- What the handler last said about its progress (percent and a message).
ALTER TABLE instances ADD COLUMN progress_percent TINYINT UNSIGNED NULL AFTER deadline_at;
ALTER TABLE instances ADD COLUMN progress_message VARCHAR(512) NULL AFTER progress_percent;
-- A manual rerun points at the instance it repeats.
ALTER TABLE instances ADD COLUMN rerun_of CHAR(30) NULL AFTER progress_message;

CREATE INDEX ix_instances_deadline ON instances (state, deadline_at);
