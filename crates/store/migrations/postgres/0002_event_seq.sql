-- The last event sequence number, kept beside the audit head so a batch of
-- events takes its numbers under the control lock and goes in as one
-- multi-row insert. It starts past every number already handed out,
-- including those of pruned events (the serial's own record).
ALTER TABLE control ADD COLUMN event_seq BIGINT NOT NULL DEFAULT 0;
UPDATE control SET event_seq = GREATEST(
    (SELECT COALESCE(MAX(seq), 0) FROM events),
    (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_seq_seq)
);
