-- Files kept for runs: their metadata. The content is an object at
-- ns/{namespace}/{file_id} in the object store; a row is written only after
-- its object is complete, so an object without a row is an orphan (a crash
-- between the two) that the sweeper removes. tenant_id is '' where the
-- deployment has no tenants: it never equals a tenant's id, so no id of one
-- tenant resolves in another.
CREATE TABLE files (
    file_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    -- the session key whose namespace holds the object
    namespace TEXT NOT NULL,
    -- a session's file (a run's output): its session; an input file: NULL
    session_id TEXT,
    -- an input file: the resource it belongs to (kind:id:version for a
    -- shared one); a session's file: NULL
    resource TEXT,
    name TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    verdict TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
-- One file per name in a session: a second upload of a name replaces the
-- first. A session is named within its namespace: two conversations of one
-- user each have their own session of the same id.
CREATE UNIQUE INDEX files_by_session_name ON files (tenant_id, user_id, namespace, session_id, name)
    WHERE session_id IS NOT NULL;
CREATE INDEX files_by_namespace ON files (namespace);

-- Sessions that hold files, and when they were last written or read: the
-- sweeper deletes those untouched past the retention, with their objects.
CREATE TABLE file_sessions (
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    touched_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, user_id, namespace, session_id)
);
CREATE INDEX file_sessions_by_touch ON file_sessions (touched_at);
