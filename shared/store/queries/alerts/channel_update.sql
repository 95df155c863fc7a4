UPDATE alert_channels SET definition = ?, updated_at = ? WHERE name = ?
