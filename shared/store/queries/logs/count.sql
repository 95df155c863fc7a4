SELECT COUNT(*) FROM instance_logs WHERE instance_id = ?
