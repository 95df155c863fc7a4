SELECT id, task_id, task_version, attempt, state, worker_id, lease_expires_at, deadline_at
-- Held instances are bounded by the workers' slots: their states' range of the
-- state index has them all.
FROM instances FORCE INDEX (ix_instances_state)
WHERE state = 'RUNNING' AND deadline_at < ?
ORDER BY deadline_at
LIMIT ?
