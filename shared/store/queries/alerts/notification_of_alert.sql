SELECT id, alert_id, report_id, channel, kind, status, attempts, next_attempt_at, last_error, created_at, sent_at
FROM alert_notifications
WHERE alert_id = ?
ORDER BY id
