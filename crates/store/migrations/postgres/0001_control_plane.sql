-- The control plane's first schema. Times are Unix seconds (BIGINT), ids
-- TEXT, flags 0/1. The SQLite schema has the same tables and columns.

-- One row: the settings version (bumped, under the row's write lock, by every
-- change to a tenant's settings, so versions commit in order) and the head
-- of the audit chain (seq, hash), advanced only under the same kind of lock.
CREATE TABLE control (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    settings_version BIGINT NOT NULL,
    audit_seq BIGINT NOT NULL,
    audit_hash TEXT NOT NULL
);
INSERT INTO control (id, settings_version, audit_seq, audit_hash)
VALUES (1, 0, 0, '0000000000000000000000000000000000000000000000000000000000000000');

CREATE TABLE tenants (
    tenant_id TEXT PRIMARY KEY,
    -- the control.settings_version of this tenant's last change
    settings_version BIGINT NOT NULL,
    policy_version BIGINT NOT NULL DEFAULT 0,
    gate_mode TEXT NOT NULL DEFAULT 'high',
    kill_switch BIGINT NOT NULL DEFAULT 0,
    kill_switch_reason TEXT,
    updated_at BIGINT NOT NULL
);
CREATE INDEX tenants_by_settings_version ON tenants (settings_version);

-- Every policy a tenant ever had; the current one is tenants.policy_version.
CREATE TABLE policy_versions (
    tenant_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    document TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, version)
);

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    status TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    execute_body_sha256 TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    ended_at BIGINT,
    end_reason TEXT,
    ended_by TEXT
);
CREATE INDEX runs_live ON runs (status, heartbeat_at);
CREATE INDEX runs_by_tenant ON runs (tenant_id, run_id);

-- Refusals and run events. A refusal outside a run has no run_id.
CREATE TABLE events (
    seq BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    tenant_id TEXT,
    run_id TEXT,
    kind TEXT NOT NULL,
    reason TEXT,
    host TEXT,
    rule TEXT,
    request_id TEXT,
    lease_id TEXT,
    dry_run BIGINT NOT NULL DEFAULT 0,
    refusal BIGINT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
CREATE INDEX events_refusals ON events (refusal, seq);
CREATE INDEX events_by_at ON events (at);

-- Append-only and hash-chained: each entry's hash covers its fields and the
-- previous entry's hash. Never pruned.
CREATE TABLE audit_log (
    seq BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    tenant_id TEXT,
    subject TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
