INSERT INTO task_versions (task_id, version, definition, operator, created_at)
VALUES (?, ?, ?, ?, ?)
