UPDATE tasks
SET version = ?, owner = ?, definition = ?, enabled = 1, deleted_at = NULL, updated_at = ?
WHERE id = ?
