SELECT name, definition, created_at, updated_at FROM alert_channels ORDER BY name
