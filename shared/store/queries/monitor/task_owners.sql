SELECT name, owner FROM tasks WHERE deleted_at IS NULL
