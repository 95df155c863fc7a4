SELECT id, task_id, task_version, attempt, state, worker_id, lease_expires_at, deadline_at
-- Held instances are bounded by the workers' slots: the held index has them all.
FROM instances FORCE INDEX (ix_instances_held)
WHERE state = 'RUNNING' AND deadline_at < ?
ORDER BY deadline_at
LIMIT ?
