UPDATE alerts
SET acknowledged_at = ?, acknowledged_by = ?, ack_comment = ?
WHERE id = ?
