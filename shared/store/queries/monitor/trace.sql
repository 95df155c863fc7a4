SELECT id FROM instances WHERE trace_id = ?
