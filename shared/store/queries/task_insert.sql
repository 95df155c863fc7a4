INSERT INTO tasks (id, name, version, enabled, owner, definition, created_at, updated_at)
VALUES (?, ?, 1, 1, ?, ?, ?, ?)
