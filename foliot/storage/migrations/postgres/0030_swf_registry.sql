-- AWS SWF: access keys (secrets encrypted with FOLIOT_SECRET_KEY), domains and types, per region.
-- Names are COLLATE "C" (byte order, as in SQLite): the order ListDomains and List*Types page in.
CREATE TABLE swf_credentials (
    access_key_id TEXT PRIMARY KEY,
    secret_enc TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE swf_domains (
    region TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL,
    description TEXT,
    retention_days TEXT NOT NULL,
    tags TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    deprecated_at BIGINT,
    PRIMARY KEY (region, name)
);
CREATE INDEX swf_domains_status ON swf_domains(region, status, name);
CREATE TABLE swf_types (
    region TEXT COLLATE "C" NOT NULL,
    domain TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    version TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL,
    description TEXT,
    config TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    deprecated_at BIGINT,
    PRIMARY KEY (region, domain, kind, name, version)
);
CREATE INDEX swf_types_status ON swf_types(region, domain, kind, status, name, version);
