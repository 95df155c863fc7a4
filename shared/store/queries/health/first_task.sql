SELECT MIN(created_at) FROM tasks
