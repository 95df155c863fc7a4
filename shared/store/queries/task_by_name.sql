SELECT id, name, version, enabled, definition, created_at, updated_at, deleted_at
FROM tasks
WHERE name = ? AND deleted_at IS NULL
