SELECT report FROM health_reports WHERE id = ?
