-- A submission is recorded when it takes its number, `pending` until its
-- scan finishes (`ok` or `error`, with its levels and report); the gate
-- judges a head by its newest submission, so it reads them by head.
-- `finished_at` is when the scan finished (or was marked errored); scans
-- recorded before this migration finished when they were recorded.
ALTER TABLE dependency_scans ADD COLUMN finished_at BIGINT;
UPDATE dependency_scans SET finished_at = created_at;
CREATE INDEX dependency_scans_by_head ON dependency_scans (tenant_id, repository, pull_request, head_sha, submitted);
CREATE INDEX dependency_scans_pending ON dependency_scans (created_at) WHERE status = 'pending';
