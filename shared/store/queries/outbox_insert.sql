INSERT INTO outbox (event_id, subject, task_name, instance_id, state, payload, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
