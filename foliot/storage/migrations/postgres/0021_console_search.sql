-- The console's run search by version and by error class, index-backed (issue 11): both lived
-- only in the run document; they become columns written with it (`storage.base.search_columns`)
-- with an index each. (Not generated columns: any JSON operator on a document holding \u0000
-- anywhere fails, and such a column would fail that run's every write.) The error class is kept
-- as its JSON text (`"card_declined"`, quotes and escapes as in the document), so any class a
-- handler sends compares exactly. The error-class indexes (alone, and after the status) are
-- partial: runs without an error (most of them) cost it nothing. A document holding \u0000 cannot
-- be read here: such a run gets its columns at its next write.
ALTER TABLE runs ADD COLUMN workflow_version BIGINT;
ALTER TABLE runs ADD COLUMN error_class TEXT;
UPDATE runs SET workflow_version = (doc::json ->> 'version')::bigint,
    error_class = (doc::json -> 'error' -> 'cls')::text
    WHERE strpos(doc, '\u0000') = 0;
CREATE INDEX runs_by_version ON runs(app, workflow, workflow_version, created_at DESC, run_id DESC);
CREATE INDEX runs_by_error_class ON runs(app, error_class, created_at DESC, run_id DESC)
    WHERE error_class IS NOT NULL;
CREATE INDEX runs_by_status_error_class ON runs(app, status, error_class, created_at DESC, run_id DESC)
    WHERE error_class IS NOT NULL;
