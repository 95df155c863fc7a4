UPDATE alert_rules SET definition = ?, updated_at = ? WHERE name = ?
