-- The last event sequence number, kept beside the audit head so a batch of
-- events takes its numbers under the control lock and goes in as one
-- multi-row insert. It starts past every number already handed out,
-- including those of pruned events (AUTOINCREMENT's own record).
ALTER TABLE control ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;
UPDATE control SET event_seq = MAX(
    (SELECT COALESCE(MAX(seq), 0) FROM events),
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)
);
