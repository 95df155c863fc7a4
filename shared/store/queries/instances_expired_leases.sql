SELECT id, task_id, task_version, attempt, state, worker_id, lease_expires_at, deadline_at
FROM instances
WHERE state IN ('DISPATCHED', 'RUNNING') AND lease_expires_at < ?
ORDER BY lease_expires_at
LIMIT ?
