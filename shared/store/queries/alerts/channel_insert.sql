INSERT INTO alert_channels (name, definition, created_at, updated_at) VALUES (?, ?, ?, ?)
