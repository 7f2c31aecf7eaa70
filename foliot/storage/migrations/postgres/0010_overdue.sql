-- The overdue view (GET /admin/runs/overdue): each open run's current step and since when it
-- is there, in columns behind a partial index, so the view reads only overdue rows. Runs
-- stored before this have no entry time: their last change stands in for it.
ALTER TABLE runs ADD COLUMN current_step TEXT;
ALTER TABLE runs ADD COLUMN step_since BIGINT;
UPDATE runs SET current_step = doc::json ->> 'current_step',
    step_since = COALESCE((doc::json ->> 'step_since')::bigint, (doc::json ->> 'updated_at')::bigint)
    WHERE is_open;
CREATE INDEX runs_step_since ON runs(step_since) WHERE is_open;
