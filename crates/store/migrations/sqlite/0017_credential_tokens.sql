-- Tokens gatehouse mints from a credential that every node shares (an
-- OAuth access token and the refresh token its provider rotated), sealed
-- to the gateway's key like the credential itself. The node holding
-- claimed_by until claimed_until is the one refreshing: no two nodes ever
-- present one refresh token. rotation counts the refreshes and is bound
-- into each seal.
CREATE TABLE credential_tokens (
    credential_id TEXT PRIMARY KEY REFERENCES credentials (credential_id) ON DELETE CASCADE,
    rotation INTEGER NOT NULL,
    sealed_refresh TEXT,
    sealed_access TEXT,
    access_expires_at INTEGER,
    claimed_by TEXT,
    claimed_until INTEGER,
    updated_at INTEGER NOT NULL
);
