UPDATE alerts SET notified_at = ?, silenced = 0 WHERE id = ?
