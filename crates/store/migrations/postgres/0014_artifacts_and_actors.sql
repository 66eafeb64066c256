-- A refusal of a person's own action outside any run names who acted
-- (`person:NAME`, as the platform relayed it); a refused upload keeps the
-- file's name, so a run's artifacts list what it tried to write and why it
-- was refused.
ALTER TABLE events ADD COLUMN actor TEXT;
ALTER TABLE events ADD COLUMN file_name TEXT;

-- The run that wrote a session's file (its artifacts); NULL for input
-- files the platform stores and for files written before this migration.
ALTER TABLE files ADD COLUMN run_id TEXT;
CREATE INDEX files_by_run ON files (run_id) WHERE run_id IS NOT NULL;
