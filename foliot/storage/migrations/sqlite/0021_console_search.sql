-- The console's run search by version and by error class, index-backed (issue 11): both lived
-- only in the run document; they become columns written with it (`storage.base.search_columns`)
-- with an index each. The error class is kept as its JSON text (`"card_declined"`, quotes and
-- escapes as in the document), so any class a handler sends (\u0000 included) compares exactly,
-- and PostgreSQL can hold it too. The error-class indexes (alone, and after the status) are
-- partial: runs without an error (most of them) cost it nothing.
ALTER TABLE runs ADD COLUMN workflow_version INTEGER;
ALTER TABLE runs ADD COLUMN error_class TEXT;
UPDATE runs SET workflow_version = json_extract(doc, '$.version'), error_class = doc -> '$.error.cls';
CREATE INDEX runs_by_version ON runs(app, workflow, workflow_version, created_at DESC, run_id DESC);
CREATE INDEX runs_by_error_class ON runs(app, error_class, created_at DESC, run_id DESC)
    WHERE error_class IS NOT NULL;
CREATE INDEX runs_by_status_error_class ON runs(app, status, error_class, created_at DESC, run_id DESC)
    WHERE error_class IS NOT NULL;
