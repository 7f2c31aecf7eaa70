-- The operator console (issue 11): scoped operator tokens, runs counted by (app, status) in
-- the same transaction that changes a status (triggers), and the indexes its lists walk.
CREATE TABLE operator_tokens (
    token_id TEXT PRIMARY KEY,
    name TEXT,
    role TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE run_counts (
    app TEXT NOT NULL,
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (app, status)
) WITHOUT ROWID;
INSERT INTO run_counts (app, status, n) SELECT app, status, COUNT(*) FROM runs GROUP BY app, status;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
    INSERT INTO run_counts (app, status, n) VALUES (new.app, new.status, 1)
        ON CONFLICT (app, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER run_counts_update AFTER UPDATE OF status ON runs WHEN old.status <> new.status BEGIN
    INSERT INTO run_counts (app, status, n) VALUES (new.app, new.status, 1)
        ON CONFLICT (app, status) DO UPDATE SET n = n + 1;
    UPDATE run_counts SET n = n - 1 WHERE app = old.app AND status = old.status;
END;
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
    UPDATE run_counts SET n = n - 1 WHERE app = old.app AND status = old.status;
END;
CREATE INDEX runs_by_status ON runs(app, status, created_at DESC, run_id DESC);
CREATE INDEX runs_by_workflow ON runs(app, workflow, created_at DESC, run_id DESC);
CREATE INDEX runs_by_business_key ON runs(app, business_key, created_at DESC, run_id DESC)
    WHERE business_key IS NOT NULL;
