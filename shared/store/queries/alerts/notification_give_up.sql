UPDATE alert_notifications
SET status = 'failed', attempts = attempts + 1, last_error = ?
WHERE id = ?
