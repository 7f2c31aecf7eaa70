-- Flow control of pull tasks across a restart (issue 23): an attempt's priority (1..5, NULL:
-- the default 3) and the rate-limit buckets its offer takes a token of (JSON
-- `[[name, interval_us, label], ...]`, NULL: none), written when the attempt opens, so that
-- recovery offers an unclaimed queued task again as it was offered (`Node.recover`).
ALTER TABLE tasks ADD COLUMN priority INTEGER;
ALTER TABLE tasks ADD COLUMN buckets TEXT;
