SELECT id, name, version, enabled, definition, created_at, updated_at, deleted_at
FROM tasks
WHERE name = ?
FOR UPDATE
