-- The dry-run of a workflow version (issue 24) without reading every open run: the open runs
-- counted by (version, current step, status) from an index alone, each group's newest runIds
-- (and, where the candidate's reads matter, its runs' states) read along the same index in
-- (created_at, run_id) order; and the workflow's last closed runs, the replayed sample, found
-- without walking its open runs. Both partial: each holds only the rows it serves.
CREATE INDEX runs_open_by_step ON runs(app, workflow, workflow_version, current_step, status, created_at DESC, run_id DESC)
    WHERE is_open = 1;
CREATE INDEX runs_closed_by_workflow ON runs(app, workflow, created_at DESC, run_id DESC)
    WHERE is_open = 0;
