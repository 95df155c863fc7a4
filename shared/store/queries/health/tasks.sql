SELECT name, owner, enabled, created_at FROM tasks WHERE deleted_at IS NULL ORDER BY name
