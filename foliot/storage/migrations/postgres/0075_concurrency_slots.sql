-- Concurrency keys (issue 23): a run of a workflow with `concurrency` holds a slot of its key
-- while admitted and open (`slot_key`), or waits for one while queued (`queue_key`), both
-- "<workflow>/<key value>". Written only by units that change them (`UnitOfWork.slot`); the
-- admission guard counts `slot_key` and reads the oldest `queue_key` under a lock of the key.
ALTER TABLE runs ADD COLUMN slot_key TEXT;
ALTER TABLE runs ADD COLUMN queue_key TEXT;
CREATE INDEX runs_by_slot ON runs (app, slot_key) WHERE slot_key IS NOT NULL;
CREATE INDEX runs_by_queue ON runs (app, queue_key, created_at, run_id) WHERE queue_key IS NOT NULL;
