-- How long an instance's last attempt ran, in microseconds (NULL if it never started).
SELECT TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) FROM instances WHERE id = ?
