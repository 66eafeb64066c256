//! Tenants' MCP servers: each declaration checked (names, endpoints read
//! by the door's own strict URL parser, tool rules), then stored as a new
//! version and audited (`mcp_servers.set`). The door reads the current one
//! with the tenant's other settings.

use gatehouse_core::Reason;
pub use gatehouse_egress::policy::mcp::endpoint_of;
use gatehouse_mcp::{McpServer, validate_servers};
use gatehouse_store::PolicyVersion;

use crate::{Plane, PlaneError, Result};

/// A tenant's declared servers and the version they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServers {
    /// 0 when the tenant never declared any.
    pub version: i64,
    /// The servers, as declared.
    pub servers: Vec<McpServer>,
    /// Who declared them, and when (none for version 0).
    pub declared: Option<(String, i64)>,
}

/// The servers of one stored declaration (a document gatehouse wrote).
pub fn servers_of(document: &str) -> std::result::Result<Vec<McpServer>, PlaneError> {
    #[derive(serde::Deserialize)]
    struct Document {
        servers: Vec<McpServer>,
    }
    serde_json::from_str::<Document>(document)
        .map(|d| d.servers)
        .map_err(|_| PlaneError::Internal("mcp_servers_unreadable"))
}

impl Plane {
    /// A tenant's MCP servers (version 0 and none when it never declared any).
    pub async fn mcp_servers(&self, tenant_id: &str) -> Result<McpServers> {
        let tenant = self.store()?.tenant(tenant_id).await?;
        match tenant {
            Some(t) if t.mcp_servers_missing => Err(PlaneError::Refused(Reason::PolicyUnreadable)),
            Some(t) => match t.mcp_servers {
                Some(PolicyVersion { version, document, actor, created_at, .. }) => Ok(McpServers {
                    version,
                    servers: servers_of(&document)?,
                    declared: Some((actor, created_at)),
                }),
                None => Ok(McpServers { version: 0, servers: Vec::new(), declared: None }),
            },
            None => Ok(McpServers { version: 0, servers: Vec::new(), declared: None }),
        }
    }

    /// Declares a tenant's MCP servers: every server checked before
    /// anything is stored, the whole list one new version.
    pub async fn set_mcp_servers(
        &self,
        request_id: &str,
        tenant_id: &str,
        servers: Vec<McpServer>,
        actor: &str,
    ) -> Result<PolicyVersion> {
        validate_servers(&servers, endpoint_of).map_err(|e| {
            tracing::info!(request_id, error = %e, "MCP servers rejected");
            PlaneError::invalid(e.0)
        })?;
        let document = serde_json::to_string(&serde_json::json!({ "servers": servers }))
            .map_err(|_| PlaneError::Internal("mcp_servers_unserializable"))?;
        let store = self.store()?;
        let stored = store.set_mcp_servers(tenant_id, &document, actor, self.clock.now()).await?;
        if let Err(e) = self.policies.refresh(store).await {
            tracing::warn!(code = e.code(), "settings replica not refreshed; the poll will catch up");
        }
        tracing::info!(
            request_id,
            tenant_id,
            version = stored.version,
            servers = servers.len(),
            "MCP servers set"
        );
        Ok(stored)
    }
}

#[cfg(test)]
mod tests {
    use gatehouse_mcp::Endpoint;

    use super::*;

    #[test]
    fn an_endpoint_is_read_as_the_door_reads_a_request() {
        let e = endpoint_of("https://MCP.Example.com/a/../mcp?x=1").unwrap();
        assert_eq!(
            e,
            Endpoint {
                scheme: "https".into(),
                host: "mcp.example.com".into(),
                port: 443,
                path: "/mcp".into()
            }
        );
        let e = endpoint_of("http://127.0.0.1:8931/mcp").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8931));
        for bad in ["ftp://x/mcp", "https://user@x/mcp", "https://x/a%2Fb", "/mcp", "https://x/a;b"] {
            assert!(endpoint_of(bad).is_err(), "{bad}");
        }
    }
}
