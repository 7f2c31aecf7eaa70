-- signalIds leave the run document for a table with a unique key (dedupe by the store),
-- runs get `closed_at` and the indexes retention pruning walks.
CREATE TABLE signal_ids (
    run_id TEXT NOT NULL,
    signal_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (run_id, signal_id)
) WITHOUT ROWID;
INSERT OR IGNORE INTO signal_ids (run_id, signal_id, at)
    SELECT runs.run_id, ids.value, runs.created_at
    FROM runs, json_each(runs.doc, '$.signal_ids') AS ids
    WHERE runs.doc LIKE '%"signal_ids":["%';
ALTER TABLE runs ADD COLUMN closed_at INTEGER;
UPDATE runs SET closed_at = COALESCE(json_extract(doc, '$.closed_at'), json_extract(doc, '$.updated_at'))
    WHERE is_open = 0;
CREATE INDEX runs_closed ON runs(closed_at, run_id) WHERE is_open = 0;
CREATE INDEX idempotency_created ON idempotency(created_at);
