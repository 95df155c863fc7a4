SELECT definition FROM task_versions WHERE task_id = ? AND version = ?
