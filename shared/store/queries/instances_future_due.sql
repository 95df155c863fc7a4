-- CREATED and RETRYING instances due after a time, soonest first, and whether
-- each is a cron fire created ahead (a CREATED cron instance not due yet). One branch per
-- (state, priority) reads ix_instances_state (state, priority, due_at, …,
-- trigger_type) as a range in due order, from the index alone, and stops at the
-- limit; `state IN (…)` over the whole index instead read every CREATED row of a
-- backlog and sorted them.
SELECT id, due_at, cron_fire FROM (
    (SELECT id, due_at, trigger_type = 'cron' AS cron_fire FROM instances WHERE state = 'CREATED' AND priority = 0 AND due_at > ? ORDER BY due_at LIMIT ?)
    UNION ALL
    (SELECT id, due_at, trigger_type = 'cron' AS cron_fire FROM instances WHERE state = 'CREATED' AND priority = 1 AND due_at > ? ORDER BY due_at LIMIT ?)
    UNION ALL
    (SELECT id, due_at, trigger_type = 'cron' AS cron_fire FROM instances WHERE state = 'CREATED' AND priority = 2 AND due_at > ? ORDER BY due_at LIMIT ?)
    UNION ALL
    (SELECT id, due_at, FALSE AS cron_fire FROM instances WHERE state = 'RETRYING' AND priority = 0 AND due_at > ? ORDER BY due_at LIMIT ?)
    UNION ALL
    (SELECT id, due_at, FALSE AS cron_fire FROM instances WHERE state = 'RETRYING' AND priority = 1 AND due_at > ? ORDER BY due_at LIMIT ?)
    UNION ALL
    (SELECT id, due_at, FALSE AS cron_fire FROM instances WHERE state = 'RETRYING' AND priority = 2 AND due_at > ? ORDER BY due_at LIMIT ?)
) due
ORDER BY due_at
LIMIT ?
