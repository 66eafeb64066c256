-- A tenant's refusals, newest first, without walking every other tenant's:
-- the settings page and `GET /v1/refusals?tenant_id=` page along this index
-- (a partial one: other events never enter it).
CREATE INDEX events_refusals_by_tenant ON events (tenant_id, seq) WHERE refusal = 1;
