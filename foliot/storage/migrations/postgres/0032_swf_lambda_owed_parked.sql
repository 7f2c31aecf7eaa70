-- SWF, issue 8's last pieces.
-- Lambda functions ScheduleLambdaFunction invokes, per region (PUT /admin/lambda/{region}/{name}).
CREATE TABLE swf_lambda_functions (
    region TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    url TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (region, name)
);
-- Closed executions whose closing effects (the child policy, the parent's notice) are not all
-- acknowledged yet: written with the close, deleted once every receiver answered; start-up
-- performs what is left again.
CREATE TABLE swf_owed (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (region, run_id)
);
-- Executions parked because their actor crashed too often (an operator resumes them).
CREATE TABLE swf_parked (
    region TEXT COLLATE "C" NOT NULL,
    run_id TEXT COLLATE "C" NOT NULL,
    reason TEXT NOT NULL,
    parked_at BIGINT NOT NULL,
    PRIMARY KEY (region, run_id)
);
