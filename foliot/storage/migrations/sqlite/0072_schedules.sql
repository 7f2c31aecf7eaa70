-- Schedules (issue 22): one row per (app, schedule name), written only by its actor
-- (`sched:<app>:<name>`), guarded by `version`. `document` is the definition as PUT (canonical
-- JSON, defaults filled); `state` the machine's own fields (cursor, next time, buffered fire,
-- last run, ...); paused, its reason and the counters are columns too, for operators' queries.
CREATE TABLE schedules (
    app TEXT NOT NULL,
    name TEXT NOT NULL,
    document TEXT NOT NULL,
    state TEXT NOT NULL,
    paused INTEGER NOT NULL,
    pause_reason TEXT,
    fired INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    missed INTEGER NOT NULL,
    last_time INTEGER,
    last_run_id TEXT,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (app, name)
);
-- A scheduled time starts at most one run, ever: the fire record is written in the unit of
-- work that inserts the run (`UnitOfWork.fire`), under this key. Kept when the run is pruned
-- and when the schedule is deleted.
CREATE TABLE schedule_fires (
    app TEXT NOT NULL,
    name TEXT NOT NULL,
    scheduled_time INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    fired_at INTEGER NOT NULL,
    PRIMARY KEY (app, name, scheduled_time)
);
