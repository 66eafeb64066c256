-- A run's asks for egress its policy refuses: one exact rule each (its
-- JSON as a policy entry), pending until a person approves it once (for
-- the run) or always (a new policy version with exactly that rule), or
-- denies it, or it expires. The same ask of one run is one row: the id is
-- derived from the run and the rule.
CREATE TABLE egress_proposals (
    proposal_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    rule TEXT NOT NULL,
    why TEXT NOT NULL,
    status TEXT NOT NULL,
    scope TEXT,
    decided_by TEXT,
    decided_at INTEGER,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX egress_proposals_by_tenant ON egress_proposals (tenant_id, created_at, proposal_id);
CREATE INDEX egress_proposals_by_run ON egress_proposals (run_id);
