UPDATE alerts
SET status = 'resolved', open_fingerprint = NULL, resolved_at = ?
WHERE id = ?
