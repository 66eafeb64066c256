-- Every declaration of a tenant's MCP servers (a JSON document: servers,
-- their endpoints and tool rules), versioned like its egress policy; the
-- current one is tenants.mcp_servers_version.
CREATE TABLE mcp_server_versions (
    tenant_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    document TEXT NOT NULL,
    actor TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, version)
);
ALTER TABLE tenants ADD COLUMN mcp_servers_version BIGINT NOT NULL DEFAULT 0;
