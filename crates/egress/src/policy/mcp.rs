//! A tenant's declared MCP servers as the door matches requests to them:
//! one reading of an endpoint's URL, the door's own, for the declaration
//! (checked when it is stored) and for every request.

use gatehouse_core::Reason;
use gatehouse_mcp::{Endpoint, McpServer, ToolRules};

use super::Policy;
use super::path::normalize;
use crate::target::{Host, Target, parse_url};

/// One declared server: its name, where it is, what a run may call on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpDeclared {
    /// The tenant's name for it.
    pub name: String,
    /// Its endpoint.
    pub endpoint: Endpoint,
    /// Its tool rules.
    pub tools: ToolRules,
}

fn host_text(host: &Host) -> String {
    match host {
        Host::Name(name) => name.clone(),
        Host::Ip(ip) => ip.to_string(),
    }
}

/// An endpoint's parts, read by the strict URL parser, the path normalized
/// the way path rules see it.
pub fn endpoint_of(url: &str) -> Result<Endpoint, &'static str> {
    let target = parse_url(url).map_err(|_| "an MCP server's url must be an absolute http(s) URL")?;
    let path = normalize(&target.path_and_query)
        .map_err(|_| "an MCP server's url path is ambiguous (an encoded / or \\, a ; parameter)")?;
    Ok(Endpoint {
        scheme: target.scheme.as_str().to_owned(),
        host: host_text(&target.host),
        port: target.port,
        path,
    })
}

/// The declarations of a stored document's servers (checked when stored;
/// one that no longer reads is an error, never skipped).
pub fn declared(servers: Vec<McpServer>) -> Result<Vec<McpDeclared>, &'static str> {
    servers
        .into_iter()
        .map(|s| Ok(McpDeclared { endpoint: endpoint_of(&s.url)?, name: s.name, tools: s.tools }))
        .collect()
}

impl Policy {
    /// This policy with the tenant's declared MCP servers.
    pub fn with_mcp_servers(mut self, servers: Vec<McpDeclared>) -> Self {
        self.mcp = servers;
        self
    }

    /// Whether `target`'s host and port are a declared server's.
    pub fn serves_mcp(&self, target: &Target) -> bool {
        // Every request asks: a tenant without MCP servers pays nothing.
        if self.mcp.is_empty() {
            return false;
        }
        let host = host_text(&target.host);
        self.mcp.iter().any(|m| m.endpoint.port == target.port && m.endpoint.host.eq_ignore_ascii_case(&host))
    }

    /// The declared server a request to `target` is for, if any. A path
    /// that reads two ways on a declared server's host is refused
    /// (`url_ambiguous_path`): it could be the endpoint's.
    pub fn mcp_server(&self, target: &Target) -> Result<Option<&McpDeclared>, Reason> {
        if !self.serves_mcp(target) {
            return Ok(None);
        }
        let path = normalize(&target.path_and_query).map_err(|_| Reason::UrlAmbiguousPath)?;
        let host = host_text(&target.host);
        Ok(self.mcp.iter().find(|m| m.endpoint.matches(target.scheme.as_str(), &host, target.port, &path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        let servers = vec![McpServer {
            name: "tools".into(),
            url: "http://127.0.0.1:8931/mcp".into(),
            tools: ToolRules { allow: None, deny: vec!["rm".into()] },
        }];
        Policy::open().with_mcp_servers(declared(servers).unwrap())
    }

    #[test]
    fn requests_to_a_declared_endpoint_are_its_whatever_their_spelling() {
        let p = policy();
        for url in
            ["http://127.0.0.1:8931/mcp", "http://127.0.0.1:8931/MCP/?x=1", "http://127.0.0.1:8931/a/../mcp"]
        {
            let target = parse_url(url).unwrap();
            assert_eq!(p.mcp_server(&target).unwrap().map(|m| m.name.as_str()), Some("tools"), "{url}");
        }
        for url in ["http://127.0.0.1:8931/other", "http://127.0.0.1:8932/mcp", "https://127.0.0.1:8931/mcp"]
        {
            assert_eq!(p.mcp_server(&parse_url(url).unwrap()).unwrap(), None, "{url}");
        }
        let ambiguous = parse_url("http://127.0.0.1:8931/%2Fmcp").unwrap();
        assert_eq!(p.mcp_server(&ambiguous), Err(Reason::UrlAmbiguousPath));
        // The host's tunnels are terminated: every request is read.
        let target = parse_url("https://127.0.0.1:8931/").unwrap();
        assert_eq!(p.check_host(&target, 0), Ok(super::super::HostVerdict::PerRequest));
    }
}
