-- Flow control across a restart (issue 23). `tasks`: an attempt's priority (1..5, NULL: the
-- default 3) and the rate-limit buckets its offer takes a token of (JSON
-- `[[name, interval_us, label], ...]`, NULL: none), written when the attempt opens, so that
-- recovery offers an unclaimed queued task again as it was offered (`Node.recover`).
-- `rate_buckets_by_tat`: the pruner deletes idle buckets (their TAT long passed: full again,
-- as one never used) oldest first, a bounded batch at a time.
ALTER TABLE tasks ADD COLUMN priority INTEGER;
ALTER TABLE tasks ADD COLUMN buckets TEXT;
CREATE INDEX rate_buckets_by_tat ON rate_buckets (tat);
