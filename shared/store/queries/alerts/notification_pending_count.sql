SELECT COUNT(*) FROM alert_notifications WHERE status = 'pending'
