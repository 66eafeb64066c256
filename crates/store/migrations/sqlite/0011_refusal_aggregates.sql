-- Refusals from callers who proved nothing (a missing or bad token or
-- grant) are not itemized: they are counted per minute, listener, client
-- address, kind and reason, one row each with its count, upserted by its
-- key (`noise_key`; NULL for every other event). Such rows are pruned with
-- the other events and never audited. Every other event counts 1.
ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN listener TEXT;
ALTER TABLE events ADD COLUMN client TEXT;
ALTER TABLE events ADD COLUMN noise_key TEXT;
CREATE UNIQUE INDEX events_noise ON events (noise_key) WHERE noise_key IS NOT NULL;
