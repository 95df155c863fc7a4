INSERT INTO alerts (id, rule_name, kind, level, fingerprint, open_fingerprint, task_name, owner, instance_id, trace_id,
                    status, summary, details, occurrences, silenced, fired_at, last_seen_at, notified_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'firing', ?, ?, 1, ?, ?, ?, ?)
