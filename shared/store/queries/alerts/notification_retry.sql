UPDATE alert_notifications
SET attempts = attempts + 1, last_error = ?, next_attempt_at = ?
WHERE id = ?
