-- The secret key's check value (foliot/storage/keycheck.py): one row, written at the first
-- start; a node whose FOLIOT_SECRET_KEY gives another value refuses to start.
CREATE TABLE secret_key_check (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value TEXT NOT NULL
);
