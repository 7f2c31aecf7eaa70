-- Retention of schedule fires and debounce keys (issue 37), and what a fire records (issue 38).
-- `schedule_fires` rows are kept as long as the runs they started: the pruner deletes a fire
-- with its run (`schedule_fires_by_run`), also after its schedule was deleted. `source` says
-- what made the fire (`clock`, `trigger`, `backfill`; NULL for fires older than this column: the
-- clock) and `reason` a trigger's `reason`. `debounce_keys` rows go with their run too, and a
-- leading burst's row once its window is over and its run closed (`debounce_keys_leading`).
-- Debounce keys already pointing at pruned runs (one per key at most) are deleted here; fire
-- records of runs pruned before this migration, perhaps millions, by the pruner's sweep
-- (`prune_orphan_fires`, a bounded page at a time), not in one statement at start-up.
ALTER TABLE schedule_fires ADD COLUMN source TEXT;
ALTER TABLE schedule_fires ADD COLUMN reason TEXT;
CREATE INDEX schedule_fires_by_run ON schedule_fires (run_id);
CREATE INDEX debounce_keys_by_run ON debounce_keys (run_id);
CREATE INDEX debounce_keys_leading ON debounce_keys (until) WHERE mode = 'leading';
DELETE FROM debounce_keys WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = debounce_keys.run_id);
