-- When this condition last notified anyone: the start of its silence window.
SELECT MAX(notified_at) FROM alerts WHERE fingerprint = ?
