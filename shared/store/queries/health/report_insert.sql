INSERT INTO health_reports (id, scheduled_for, since, until, tasks_total, tasks_flagged, report, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
