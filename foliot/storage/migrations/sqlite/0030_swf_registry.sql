-- AWS SWF: access keys (secrets encrypted with FOLIOT_SECRET_KEY), domains and types, per region.
-- Names compare byte-wise (BINARY), the order ListDomains and List*Types page in.
CREATE TABLE swf_credentials (
    access_key_id TEXT PRIMARY KEY,
    secret_enc TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE swf_domains (
    region TEXT NOT NULL,
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    description TEXT,
    retention_days TEXT NOT NULL,
    tags TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    deprecated_at INTEGER,
    PRIMARY KEY (region, name)
) WITHOUT ROWID;
CREATE INDEX swf_domains_status ON swf_domains(region, status, name);
CREATE TABLE swf_types (
    region TEXT NOT NULL,
    domain TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    description TEXT,
    config TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    deprecated_at INTEGER,
    PRIMARY KEY (region, domain, kind, name, version)
) WITHOUT ROWID;
CREATE INDEX swf_types_status ON swf_types(region, domain, kind, status, name, version);
