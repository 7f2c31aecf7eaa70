-- The operator console (issue 11): scoped operator tokens, runs counted by (app, status) in
-- the same transaction that changes a status (a trigger), and the indexes its lists walk.
-- Counters are sharded by the writing connection (pg_backend_pid() % 16), so two group-commit
-- writers never wait on one counter row; readers sum the shards.
CREATE TABLE operator_tokens (
    token_id TEXT PRIMARY KEY,
    name TEXT,
    role TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE run_counts (
    app TEXT NOT NULL,
    status TEXT NOT NULL,
    shard INTEGER NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (app, status, shard)
);
INSERT INTO run_counts (app, status, shard, n) SELECT app, status, 0, COUNT(*) FROM runs GROUP BY app, status;
CREATE FUNCTION foliot_run_counts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO run_counts (app, status, shard, n) VALUES (NEW.app, NEW.status, pg_backend_pid() % 16, 1)
            ON CONFLICT (app, status, shard) DO UPDATE SET n = run_counts.n + 1;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO run_counts (app, status, shard, n) VALUES (OLD.app, OLD.status, pg_backend_pid() % 16, -1)
            ON CONFLICT (app, status, shard) DO UPDATE SET n = run_counts.n - 1;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_counts_insert_delete AFTER INSERT OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION foliot_run_counts();
CREATE TRIGGER run_counts_update AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION foliot_run_counts();
CREATE INDEX runs_by_status ON runs(app, status, created_at DESC, run_id DESC);
CREATE INDEX runs_by_workflow ON runs(app, workflow, created_at DESC, run_id DESC);
CREATE INDEX runs_by_business_key ON runs(app, business_key, created_at DESC, run_id DESC)
    WHERE business_key IS NOT NULL;
