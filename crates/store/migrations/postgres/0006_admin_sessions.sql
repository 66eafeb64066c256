-- The settings page's sign-in sessions. A row holds the SHA-256 of the
-- session cookie's token, never the token: a copy of the database signs
-- nobody in. A session ends at expires_at (its absolute lifetime), when
-- idle past the page's idle limit (last_seen), or at sign-out.
CREATE TABLE admin_sessions (
    token_sha256 TEXT PRIMARY KEY,
    person TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_seen BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX admin_sessions_by_expiry ON admin_sessions (expires_at);
