-- Credentials, sealed, and the leases runs hold on them.
--
-- A credential's secret is stored only as `sealed`: HPKE (RFC 9180) to the
-- gateway role's key `key_id`, bound to (tenant, credential, version). The
-- worker that writes a row cannot open it; `fingerprint` is a keyed HMAC,
-- not a hash of the secret, so a list of them cannot be brute-forced.
CREATE TABLE credentials (
    credential_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    purpose TEXT NOT NULL,
    host TEXT NOT NULL,
    -- The injection rule (JSON): {"header", "format"} or {"basic_username"}.
    inject TEXT NOT NULL,
    sealed TEXT NOT NULL,
    key_id TEXT NOT NULL,
    -- Bumped by every rotation; part of what the seal is bound to.
    version BIGINT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

-- A lease binds one run to one credential, its purpose and its one host.
-- status: live (until expires_at, renewed by the run's heartbeat) or
-- revoked (revoke_reason says why: run_ended, revoked, leaked,
-- credential_deleted).
CREATE TABLE leases (
    lease_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    credential_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT,
    revoke_reason TEXT,
    revoked_by TEXT
);
CREATE INDEX leases_by_run ON leases (run_id, lease_id);
CREATE INDEX leases_by_credential ON leases (credential_id, status);
CREATE INDEX leases_by_status ON leases (status, tenant_id, lease_id);

-- Set once any lease of the run is revoked: the run never gets another.
ALTER TABLE runs ADD COLUMN lease_revoked BIGINT NOT NULL DEFAULT 0;
