-- Debounced starts (issue 23): one row per (app, workflow, debounce key) while a burst lasts.
-- `trailing`: the pending run (not begun) that later starts of the burst update, deleted in the
-- unit that begins or closes it; `leading`: the run the burst started, and `until` (ms), the end
-- of the burst's window, pushed on by every start it drops. The primary key makes one burst per
-- key: of two first starts racing, one inserts and the other joins it.
CREATE TABLE debounce_keys (
    app     TEXT NOT NULL,
    workflow TEXT NOT NULL,
    key     TEXT NOT NULL,
    run_id  TEXT NOT NULL,
    mode    TEXT NOT NULL,
    until   BIGINT NOT NULL,
    PRIMARY KEY (app, workflow, key)
);
