SELECT id, event_id, subject, task_name, instance_id, state, payload, created_at
FROM outbox
ORDER BY id
LIMIT ?
