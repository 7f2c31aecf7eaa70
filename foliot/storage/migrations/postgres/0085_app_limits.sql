-- Per-app limits (issue 37): the admin's overrides of one app's limits
-- (`PUT /admin/apps/{app}/limits`), a JSON object of limit name -> value; a limit not in it
-- takes its setting's value. One row per app at most (none: every limit its default).
CREATE TABLE app_limits (
    app TEXT PRIMARY KEY,
    limits TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
