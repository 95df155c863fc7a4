SELECT v.definition
FROM task_versions v
JOIN tasks t ON t.id = v.task_id
WHERE t.name = ? AND v.version = ?
