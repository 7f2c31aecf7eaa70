-- AWS SWF executions: documents, history events, pending tasks and listing keys, per region.
-- Text keys are COLLATE "C" (byte order, as in SQLite): the order listings page in.
-- An execution is (region, run_id); at most one per (region, domain, workflow_id) is open.
CREATE TABLE swf_executions (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    domain TEXT COLLATE "C" NOT NULL,
    workflow_id TEXT COLLATE "C" NOT NULL,
    is_open SMALLINT NOT NULL,
    version BIGINT NOT NULL,
    last_event_id INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    closed_at BIGINT,
    doc TEXT NOT NULL,
    PRIMARY KEY (region, run_id)
);
CREATE UNIQUE INDEX swf_executions_open_workflow ON swf_executions(region, domain, workflow_id)
    WHERE is_open = 1;
CREATE INDEX swf_executions_open ON swf_executions(region, run_id) WHERE is_open = 1;
CREATE TABLE swf_events (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    event_id INTEGER NOT NULL,
    at BIGINT NOT NULL,
    type TEXT NOT NULL,
    attrs TEXT NOT NULL,
    PRIMARY KEY (region, run_id, event_id)
);
-- Scheduled, not yet started tasks; polls claim them in (priority desc, scheduled_at) order.
CREATE TABLE swf_tasks (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    scheduled_event_id INTEGER NOT NULL,
    domain TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    task_list TEXT COLLATE "C" NOT NULL,
    workflow_id TEXT COLLATE "C" NOT NULL,
    priority INTEGER NOT NULL,
    scheduled_at BIGINT NOT NULL,
    claimed_until BIGINT,
    PRIMARY KEY (region, run_id, scheduled_event_id)
);
CREATE INDEX swf_tasks_queue ON swf_tasks(
    region, domain, kind, task_list, priority DESC, scheduled_at, run_id, scheduled_event_id
);
-- One row per (execution, listing key): every List/Count filter is one index range by time.
CREATE TABLE swf_listing (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    facet TEXT COLLATE "C" NOT NULL,
    domain TEXT COLLATE "C" NOT NULL,
    is_open SMALLINT NOT NULL,
    started_at BIGINT NOT NULL,
    closed_at BIGINT,
    workflow_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (region, run_id, facet)
);
CREATE INDEX swf_listing_start ON swf_listing(region, domain, facet, is_open, started_at, workflow_id, run_id);
CREATE INDEX swf_listing_close ON swf_listing(region, domain, facet, closed_at, workflow_id, run_id)
    WHERE closed_at IS NOT NULL;
