-- Flow control (issue 23). `app_flow`: what the admin set for an app's pushes: its weight in
-- the dispatcher's round-robin (1..100) and its own rate limit (`rate_limit` sends per
-- `rate_period_ms`, both NULL: none). `rate_buckets`: one row per rate-limit bucket, its
-- theoretical arrival time (`tat`, epoch microseconds: the earliest its next send may go),
-- moved by one conditional upsert per batch of tokens, so the count is one for every node and
-- survives a restart.
CREATE TABLE app_flow (
    app TEXT PRIMARY KEY,
    weight BIGINT NOT NULL DEFAULT 1,
    rate_limit BIGINT,
    rate_period_ms BIGINT,
    updated_at BIGINT NOT NULL
);
CREATE TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    tat BIGINT NOT NULL
);
