SELECT COUNT(*) FROM health_reports WHERE scheduled_for = ?
