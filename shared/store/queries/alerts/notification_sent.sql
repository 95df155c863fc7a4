UPDATE alert_notifications
SET status = 'sent', attempts = attempts + 1, sent_at = ?, last_error = NULL
WHERE id = ?
