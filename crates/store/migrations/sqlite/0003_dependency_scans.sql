-- Pull requests' dependency scans. `submitted` is the order scans were
-- submitted in, taken from control.scan_seq before the scan is checked
-- against OSV: of two scans of one pull request, the one submitted later
-- counts, whichever finished first.
CREATE TABLE dependency_scans (
    scan_id TEXT PRIMARY KEY,
    submitted INTEGER NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL,
    repository TEXT NOT NULL,
    pull_request INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    -- The finding levels the gate decides on, comma-separated.
    levels TEXT NOT NULL,
    -- The scan as the API answered it (JSON): findings, errors, markdown.
    report TEXT NOT NULL
);
CREATE INDEX dependency_scans_by_pull_request ON dependency_scans (tenant_id, repository, pull_request, submitted);
ALTER TABLE control ADD COLUMN scan_seq INTEGER NOT NULL DEFAULT 0;
