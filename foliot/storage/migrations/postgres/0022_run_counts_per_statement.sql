-- The run counters (0020) counted inserted and deleted runs one row at a time: a statement that
-- inserts a batch of starts (group commit writes them as one INSERT) or prunes a page of closed
-- runs updated the same counter row once per run, and inside one transaction each of those
-- updates walks the chain of versions the earlier ones left (quadratic in the batch). Inserts
-- and deletes are now counted once per statement, from its transition table, grouped by (app,
-- status). Status changes stay a row trigger: it fires only when the status changes (WHEN).
DROP TRIGGER run_counts_insert_delete ON runs;
CREATE FUNCTION foliot_run_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts (app, status, shard, n)
        SELECT app, status, pg_backend_pid() % 16, COUNT(*) FROM inserted_runs GROUP BY app, status
        ON CONFLICT (app, status, shard) DO UPDATE SET n = run_counts.n + excluded.n;
    RETURN NULL;
END
$$;
CREATE FUNCTION foliot_run_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_counts (app, status, shard, n)
        SELECT app, status, pg_backend_pid() % 16, -COUNT(*) FROM deleted_runs GROUP BY app, status
        ON CONFLICT (app, status, shard) DO UPDATE SET n = run_counts.n + excluded.n;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs REFERENCING NEW TABLE AS inserted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION foliot_run_counts_inserted();
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs REFERENCING OLD TABLE AS deleted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION foliot_run_counts_deleted();
