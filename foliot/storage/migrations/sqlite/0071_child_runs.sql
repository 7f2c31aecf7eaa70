-- Child runs (issue 22): a run started by a parent's run, map or parallel step names its parent
-- here (the document holds the rest of the link: step, generation, attempt, item). Written once,
-- when the child is inserted in the parent's unit of work; listing a run's children and
-- gathering a map's outputs read it through the partial index.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
CREATE INDEX runs_by_parent ON runs (parent_run_id, created_at) WHERE parent_run_id IS NOT NULL;
