DELETE FROM alert_channels WHERE name = ?
