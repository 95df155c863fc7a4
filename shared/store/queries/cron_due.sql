SELECT s.task_id, s.trigger_index, s.task_name, s.task_version, s.expression, s.timezone, s.next_fire_at
FROM cron_schedules s
JOIN tasks t ON t.id = s.task_id
WHERE s.next_fire_at > ? AND s.next_fire_at <= ? AND t.enabled = 1 AND t.deleted_at IS NULL
ORDER BY s.next_fire_at
LIMIT ?
