SELECT id, task_id, task_version, attempt, state, worker_id, lease_expires_at, deadline_at
FROM instances
WHERE state = 'RUNNING' AND deadline_at < ?
ORDER BY deadline_at
LIMIT ?
