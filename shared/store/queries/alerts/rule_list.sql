SELECT name, definition, created_at, updated_at FROM alert_rules ORDER BY name
