SELECT id, scheduled_for, since, until, tasks_total, tasks_flagged, created_at
FROM health_reports
ORDER BY scheduled_for DESC
LIMIT ?
