-- signalIds leave the run document for a table with a unique key (dedupe by the store),
-- runs get `closed_at` and the indexes retention pruning walks.
CREATE TABLE signal_ids (
    run_id TEXT NOT NULL,
    signal_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (run_id, signal_id)
);
-- `json` (not jsonb) parses documents holding \u0000 in strings; an id that is itself one
-- cannot become text and is skipped.
INSERT INTO signal_ids (run_id, signal_id, at)
    SELECT runs.run_id, ids.value #>> '{}', runs.created_at
    FROM runs, json_array_elements(runs.doc::json -> 'signal_ids') AS ids
    WHERE runs.doc LIKE '%"signal_ids":["%' AND strpos(ids.value::text, '\u0000') = 0
    ON CONFLICT DO NOTHING;
ALTER TABLE runs ADD COLUMN closed_at BIGINT;
UPDATE runs SET closed_at = COALESCE((doc::json ->> 'closed_at')::bigint, (doc::json ->> 'updated_at')::bigint)
    WHERE NOT is_open;
CREATE INDEX runs_closed ON runs(closed_at, run_id) WHERE NOT is_open;
CREATE INDEX idempotency_created ON idempotency(created_at);
