-- The audit trail in commit order, for the audit API and `ax audit verify`.
-- Binds: since, until, after id, task ('' = every task) twice, instance ('' = every
-- instance) twice, limit.
SELECT id, instance_id, seq, event_id, task_name, attempt, from_state, to_state, operator, reason, worker_id, created_at
FROM instance_transitions
WHERE created_at >= ? AND created_at < ?
  AND id > ?
  AND (? = '' OR task_name = ?)
  AND (? = '' OR instance_id = ?)
ORDER BY id
LIMIT ?
