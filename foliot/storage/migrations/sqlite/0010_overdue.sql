-- The overdue view (GET /admin/runs/overdue): each open run's current step and since when it
-- is there, in columns behind a partial index, so the view reads only overdue rows. Runs
-- stored before this have no entry time: their last change stands in for it.
ALTER TABLE runs ADD COLUMN current_step TEXT;
ALTER TABLE runs ADD COLUMN step_since INTEGER;
UPDATE runs SET current_step = json_extract(doc, '$.current_step'),
    step_since = COALESCE(json_extract(doc, '$.step_since'), json_extract(doc, '$.updated_at'))
    WHERE is_open = 1;
CREATE INDEX runs_step_since ON runs(is_open, step_since) WHERE is_open = 1;
