-- SWF, issue 8's last pieces.
-- Lambda functions ScheduleLambdaFunction invokes, per region (PUT /admin/lambda/{region}/{name}).
CREATE TABLE swf_lambda_functions (
    region TEXT NOT NULL,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (region, name)
) WITHOUT ROWID;
-- Closed executions whose closing effects (the child policy, the parent's notice) are not all
-- acknowledged yet: written with the close, deleted once every receiver answered; start-up
-- performs what is left again.
CREATE TABLE swf_owed (
    region TEXT NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (region, run_id)
) WITHOUT ROWID;
-- Executions parked because their actor crashed too often (an operator resumes them).
CREATE TABLE swf_parked (
    region TEXT NOT NULL,
    run_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    parked_at INTEGER NOT NULL,
    PRIMARY KEY (region, run_id)
) WITHOUT ROWID;
