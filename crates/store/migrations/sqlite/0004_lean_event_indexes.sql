-- Each event row was written into four B-trees. Listing refusals walks the
-- table by seq (nearly every event is a refusal), and pruning finds its
-- bound by walking seq from the oldest row, so these two indexes only made
-- every write of a refusal flood dearer.
DROP INDEX events_refusals;
DROP INDEX events_by_at;
