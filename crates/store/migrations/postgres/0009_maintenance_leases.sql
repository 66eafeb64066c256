-- Work one node of a cluster does at a time (the file sweeper): the node
-- holding a task's row until expires_at does it; another takes the row over
-- once it has expired, so a node that dies mid-task is replaced.
CREATE TABLE maintenance_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
