-- Several nodes on one PostgreSQL (issue 10): nodes announce themselves, and partitions are
-- leased with an epoch bumped at every acquisition and an expiry on the database's clock (ms).
CREATE TABLE cluster_nodes (
    node_id      TEXT PRIMARY KEY,
    address      TEXT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    live_actors  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE cluster_leases (
    partition  INTEGER PRIMARY KEY,
    node_id    TEXT,
    epoch      BIGINT NOT NULL DEFAULT 0,
    expires_at BIGINT NOT NULL DEFAULT 0
);

INSERT INTO cluster_leases (partition) SELECT generate_series(0, 255);
