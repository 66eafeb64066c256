-- Uploads in progress. A row is written before an upload's object is begun
-- and is replaced by the file's record in the transaction that commits it
-- (a commit whose row is gone is refused: the sweeper took the upload). The
-- file sweeper judges an object, a local staging file and an incomplete S3
-- multipart upload by these rows and the files' records, never by the
-- storage's own dates (S3 may date an object from the start of its upload):
-- a row younger than the sweeper's bound keeps its upload's leftovers; an
-- older one is stale, and the sweeper deletes it, then them.
CREATE TABLE file_uploads (
    file_id TEXT PRIMARY KEY,
    -- the session key whose namespace holds the object
    namespace TEXT NOT NULL,
    -- the node taking the upload in (for an operator reading the table)
    node TEXT NOT NULL,
    started_at INTEGER NOT NULL
);
CREATE INDEX file_uploads_by_start ON file_uploads (started_at);
