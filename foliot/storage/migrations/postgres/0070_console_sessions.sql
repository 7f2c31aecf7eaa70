-- Console sessions kept server-side (foliot/storage/sessions.py, issue 20): the cookie carries
-- the session id and a 256-bit secret whose SHA-256 is stored here; signing out, an operator
-- ending the session, idle or absolute expiry, or a new admin token (key_check) end it.
CREATE TABLE console_sessions (
    session_id  TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    subject     TEXT NOT NULL,
    key_check   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
