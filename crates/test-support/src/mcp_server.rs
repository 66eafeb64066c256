//! A real MCP server, the official TypeScript SDK's (`mcp/server.mjs`,
//! installed by `npm ci --prefix crates/test-support/mcp`), on a loopback
//! port of its own, stopped on drop.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// How it answers a `POST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpAnswers {
    /// `application/json`.
    Json,
    /// `text/event-stream`.
    Sse,
}

pub struct McpServer {
    child: Child,
    /// Its port on 127.0.0.1; the endpoint is `/mcp`.
    pub port: u16,
    scheme: &'static str,
}

impl McpServer {
    /// Starts one, stateless (a server per request). A missing Node.js or
    /// SDK fails the test (`.ci/run` installs both).
    pub fn start(answers: McpAnswers) -> Self {
        Self::spawn(answers, false)
    }

    /// Starts one with sessions (`Mcp-Session-Id`, the `GET` stream,
    /// `DELETE`), counting them at `/stats`.
    pub fn stateful(answers: McpAnswers) -> Self {
        Self::spawn(answers, true)
    }

    /// Starts one (stateless, answering JSON) over HTTPS with `key` and
    /// `cert` (PEM files).
    pub fn tls(key: &std::path::Path, cert: &std::path::Path) -> Self {
        let mut server =
            Self::spawn_with(McpAnswers::Json, false, &["--tls".as_ref(), key.as_os_str(), cert.as_os_str()]);
        server.scheme = "https";
        server
    }

    /// Sessions opened and ended, and `GET` streams opened, so far.
    pub fn stats(&self) -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", &format!("http://127.0.0.1:{}/stats", self.port)])
            .output()
            .expect("curl is installed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn spawn(answers: McpAnswers, stateful: bool) -> Self {
        Self::spawn_with(answers, stateful, &[])
    }

    fn spawn_with(answers: McpAnswers, stateful: bool, extra: &[&std::ffi::OsStr]) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp");
        assert!(
            dir.join("node_modules/@modelcontextprotocol/sdk").is_dir(),
            "the MCP SDK is not installed: npm ci --prefix crates/test-support/mcp"
        );
        let mut command = Command::new("node");
        command.arg("server.mjs").current_dir(&dir).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if answers == McpAnswers::Json {
            command.arg("--json");
        }
        if stateful {
            command.arg("--stateful");
        }
        command.args(extra);
        let mut child = command.spawn().expect("node (Node.js) is installed");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening on ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            panic!("the MCP server did not start: {line:?}");
        };
        Self { child, port, scheme: "http" }
    }

    /// Its endpoint's URL.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/mcp", self.scheme, self.port)
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
