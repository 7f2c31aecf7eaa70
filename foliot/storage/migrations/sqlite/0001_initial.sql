CREATE TABLE apps (
    name TEXT PRIMARY KEY,
    handler_base_url TEXT NOT NULL,
    description TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    app TEXT NOT NULL REFERENCES apps(name),
    secret_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX api_keys_app ON api_keys(app);
CREATE TABLE signing_secrets (
    secret_id TEXT PRIMARY KEY,
    app TEXT NOT NULL REFERENCES apps(name),
    secret_enc TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX signing_secrets_app ON signing_secrets(app);
CREATE TABLE workflows (
    app TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    document TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (app, name, version)
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    app TEXT NOT NULL,
    workflow TEXT NOT NULL,
    status TEXT NOT NULL,
    business_key TEXT,
    is_open INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    doc TEXT NOT NULL
);
CREATE UNIQUE INDEX runs_open_business_key ON runs(app, workflow, business_key)
    WHERE is_open = 1 AND business_key IS NOT NULL;
CREATE INDEX runs_by_app ON runs(app, created_at DESC, run_id DESC);
CREATE INDEX runs_open ON runs(is_open) WHERE is_open = 1;
CREATE TABLE events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    type TEXT NOT NULL,
    step TEXT,
    attempt INTEGER,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE tasks (
    token TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    app TEXT NOT NULL,
    generation INTEGER NOT NULL,
    step TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    queue TEXT,
    status TEXT NOT NULL,
    close_reason TEXT,
    deadline INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX tasks_open ON tasks(status) WHERE status = 'open';
CREATE INDEX tasks_run ON tasks(run_id);
CREATE INDEX tasks_queue ON tasks(app, queue) WHERE status = 'open' AND queue IS NOT NULL;
CREATE TABLE timers (
    run_id TEXT NOT NULL,
    slot TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    due_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, slot)
);
CREATE INDEX timers_due ON timers(due_at);
CREATE TABLE idempotency (
    app TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (app, key)
);
