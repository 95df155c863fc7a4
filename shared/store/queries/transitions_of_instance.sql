SELECT seq, event_id, attempt, from_state, to_state, operator, reason, worker_id, created_at
FROM instance_transitions
WHERE instance_id = ?
ORDER BY seq
