-- Events committed but not yet acknowledged by JetStream: not missing, only late.
SELECT event_id FROM outbox
