DELETE FROM alert_rules WHERE name = ?
