//! The MCP servers a tenant declares, their tool rules, and which requests
//! are an endpoint's.

use serde::{Deserialize, Serialize};

/// Servers one tenant may declare at most.
pub const MAX_SERVERS: usize = 64;
/// Tool names one list may hold at most.
pub const MAX_TOOLS_PER_LIST: usize = 1024;
/// The longest tool name (MCP's own limit for tool names is 128).
pub const MAX_TOOL_NAME: usize = 128;

/// Which tools a run may call on one server. Deny wins; with `allow`, only
/// the tools it names; without either, every tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRules {
    /// The only tools a run may call, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Tools a run may never call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl ToolRules {
    /// Whether a run may call `tool`. Names compare exactly: MCP tool names
    /// are case-sensitive.
    pub fn permits(&self, tool: &str) -> bool {
        if self.deny.iter().any(|d| d == tool) {
            return false;
        }
        self.allow.as_ref().is_none_or(|allow| allow.iter().any(|a| a == tool))
    }
}

/// One declared server, as its tenant wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The tenant's name for it.
    pub name: String,
    /// Its Streamable HTTP endpoint.
    pub url: String,
    /// What a run may call on it.
    #[serde(default)]
    pub tools: ToolRules,
}

/// An endpoint's parts, as the door's strict URL parser read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: String,
    /// The host, lowercase (a name, or an IP address without brackets).
    pub host: String,
    /// The port, explicit or the scheme's default.
    pub port: u16,
    /// The normalized path.
    pub path: String,
}

impl Endpoint {
    /// Whether a request to these parts is this endpoint's. The query is not
    /// compared (no query takes a request out of MCP reading), and neither
    /// are the path's letter case or one trailing slash: a server that
    /// routes `/MCP` or `/mcp/` to its endpoint must not receive an unread
    /// message through them. The path given must be normalized the way the
    /// declaration's was.
    pub fn matches(&self, scheme: &str, host: &str, port: u16, path: &str) -> bool {
        let trim = |p: &str| -> String {
            let p = p.strip_suffix('/').filter(|rest| !rest.is_empty()).unwrap_or(p);
            p.to_ascii_lowercase()
        };
        self.port == port
            && self.scheme.eq_ignore_ascii_case(scheme)
            && self.host.eq_ignore_ascii_case(host)
            && trim(&self.path) == trim(path)
    }
}

/// Why a declaration is refused (the message is the caller's to show).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError(pub &'static str);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ServerError {}

/// A server's name: 1-64 of `[A-Za-z0-9._-]`.
fn is_server_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A tool name: 1-128 visible ASCII characters (MCP's guidance is letters,
/// digits, `_`, `-` and `.`; anything visible is taken so a rule can name
/// whatever a server calls its tool, but never a space or a control
/// character, which no rule could be read back with).
fn is_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks a tenant's declarations: names, tool lists, no server declared
/// twice (by name or by endpoint). `endpoint_of` reads a URL with the
/// door's strict parser (it is the caller's, so this crate parses no URL of
/// its own). Returns each server's endpoint beside it.
pub fn validate_servers(
    servers: &[McpServer],
    endpoint_of: impl Fn(&str) -> Result<Endpoint, &'static str>,
) -> Result<Vec<Endpoint>, ServerError> {
    if servers.len() > MAX_SERVERS {
        return Err(ServerError("at most 64 MCP servers"));
    }
    let mut endpoints: Vec<Endpoint> = Vec::with_capacity(servers.len());
    for (i, server) in servers.iter().enumerate() {
        if !is_server_name(&server.name) {
            return Err(ServerError("a server's name is 1-64 of A-Z a-z 0-9 . _ -"));
        }
        if servers[..i].iter().any(|s| s.name == server.name) {
            return Err(ServerError("two servers have one name"));
        }
        let endpoint = endpoint_of(&server.url).map_err(ServerError)?;
        if endpoints
            .iter()
            .any(|e| e.matches(&endpoint.scheme, &endpoint.host, endpoint.port, &endpoint.path))
        {
            return Err(ServerError("two servers have one endpoint"));
        }
        let lists = server.tools.allow.iter().chain(std::iter::once(&server.tools.deny));
        for list in lists {
            if list.len() > MAX_TOOLS_PER_LIST {
                return Err(ServerError("a tool list holds at most 1024 names"));
            }
            if !list.iter().all(|t| is_tool_name(t)) {
                return Err(ServerError("a tool name is 1-128 visible ASCII characters"));
            }
        }
        endpoints.push(endpoint);
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: Option<&[&str]>, deny: &[&str]) -> ToolRules {
        ToolRules {
            allow: allow.map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
            deny: deny.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn deny_wins_and_an_allow_list_is_the_only_way_in() {
        assert!(rules(None, &[]).permits("anything"));
        assert!(!rules(None, &["rm"]).permits("rm"));
        assert!(rules(None, &["rm"]).permits("RM"), "names are case-sensitive");
        let only = rules(Some(&["echo", "rm"]), &["rm"]);
        assert!(only.permits("echo"));
        assert!(!only.permits("rm"), "deny wins over allow");
        assert!(!only.permits("big"));
        assert!(!rules(Some(&[]), &[]).permits("echo"), "an empty allow list allows nothing");
    }

    fn endpoint(url_path: &str) -> Endpoint {
        Endpoint { scheme: "https".into(), host: "mcp.example.com".into(), port: 443, path: url_path.into() }
    }

    #[test]
    fn an_endpoint_matches_whatever_the_query_case_or_trailing_slash() {
        let e = endpoint("/mcp");
        assert!(e.matches("https", "MCP.example.com", 443, "/mcp"));
        assert!(e.matches("https", "mcp.example.com", 443, "/MCP/"));
        assert!(!e.matches("http", "mcp.example.com", 443, "/mcp"));
        assert!(!e.matches("https", "mcp.example.com", 8443, "/mcp"));
        assert!(!e.matches("https", "mcp.example.com", 443, "/mcp/other"));
        assert!(endpoint("/").matches("https", "mcp.example.com", 443, "/"));
    }

    #[test]
    fn declarations_are_checked() {
        let ok = |url: &str| -> Result<Endpoint, &'static str> {
            let path = url.split_once(".com").map_or("/", |(_, p)| p);
            Ok(endpoint(if path.is_empty() { "/" } else { path }))
        };
        let server =
            |name: &str, url: &str, tools: ToolRules| McpServer { name: name.into(), url: url.into(), tools };
        let good = [server("tools", "https://mcp.example.com/mcp", rules(Some(&["echo"]), &["rm"]))];
        assert_eq!(validate_servers(&good, ok).unwrap().len(), 1);
        let twice = [
            server("a", "https://mcp.example.com/mcp", ToolRules::default()),
            server("b", "https://mcp.example.com/MCP/", ToolRules::default()),
        ];
        assert_eq!(validate_servers(&twice, ok), Err(ServerError("two servers have one endpoint")));
        let same_name = [
            server("a", "https://mcp.example.com/x", ToolRules::default()),
            server("a", "https://mcp.example.com/y", ToolRules::default()),
        ];
        assert!(validate_servers(&same_name, ok).is_err());
        for bad in ["", "has space", "ünïcode", &"x".repeat(65)] {
            assert!(
                validate_servers(&[server(bad, "https://mcp.example.com/", ToolRules::default())], ok)
                    .is_err(),
                "{bad:?}"
            );
        }
        for bad in ["", "two words", "tab\t", &"t".repeat(129)] {
            let tools = rules(None, &[bad]);
            assert!(
                validate_servers(&[server("s", "https://mcp.example.com/", tools)], ok).is_err(),
                "{bad:?}"
            );
        }
        let refused =
            validate_servers(&[server("s", "ftp://x", ToolRules::default())], |_| Err("not an http(s) URL"));
        assert_eq!(refused, Err(ServerError("not an http(s) URL")));
    }
}
