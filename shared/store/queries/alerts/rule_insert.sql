INSERT INTO alert_rules (name, definition, created_at, updated_at) VALUES (?, ?, ?, ?)
