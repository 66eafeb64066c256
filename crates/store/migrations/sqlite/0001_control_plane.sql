-- The control plane's first schema. Times are Unix seconds (INTEGER), ids
-- TEXT, flags 0/1. The PostgreSQL schema has the same tables and columns.

-- One row: the settings version (bumped, under the row's write lock, by every
-- change to a tenant's settings, so versions commit in order) and the head
-- of the audit chain (seq, hash), advanced only under the same kind of lock.
CREATE TABLE control (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    settings_version INTEGER NOT NULL,
    audit_seq INTEGER NOT NULL,
    audit_hash TEXT NOT NULL
);
INSERT INTO control (id, settings_version, audit_seq, audit_hash)
VALUES (1, 0, 0, '0000000000000000000000000000000000000000000000000000000000000000');

CREATE TABLE tenants (
    tenant_id TEXT PRIMARY KEY,
    -- the control.settings_version of this tenant's last change
    settings_version INTEGER NOT NULL,
    policy_version INTEGER NOT NULL DEFAULT 0,
    gate_mode TEXT NOT NULL DEFAULT 'high',
    kill_switch INTEGER NOT NULL DEFAULT 0,
    kill_switch_reason TEXT,
    updated_at INTEGER NOT NULL
);
CREATE INDEX tenants_by_settings_version ON tenants (settings_version);

-- Every policy a tenant ever had; the current one is tenants.policy_version.
CREATE TABLE policy_versions (
    tenant_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    document TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, version)
);

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    status TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    execute_body_sha256 TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    ended_at INTEGER,
    end_reason TEXT,
    ended_by TEXT
);
CREATE INDEX runs_live ON runs (status, heartbeat_at);
CREATE INDEX runs_by_tenant ON runs (tenant_id, run_id);

-- Refusals and run events. A refusal outside a run has no run_id.
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    tenant_id TEXT,
    run_id TEXT,
    kind TEXT NOT NULL,
    reason TEXT,
    host TEXT,
    rule TEXT,
    request_id TEXT,
    lease_id TEXT,
    dry_run INTEGER NOT NULL DEFAULT 0,
    refusal INTEGER NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
CREATE INDEX events_refusals ON events (refusal, seq);
CREATE INDEX events_by_at ON events (at);

-- Append-only and hash-chained: each entry's hash covers its fields and the
-- previous entry's hash. Never pruned.
CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    tenant_id TEXT,
    subject TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
