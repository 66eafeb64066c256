//! A private `redis-server` per test, on a free loopback port, killed on drop.
//! Requires the `redis-server` and `redis-cli` commands (Debian `redis-server`,
//! which `.ci/run` installs).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gatehouse_ledger::{RedisLedger, RedisLedgerConfig};

use crate::free_port;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts with more `redis-server` arguments, e.g.
    /// `["--maxmemory-policy", "allkeys-lru"]`; a restart keeps them.
    pub fn start_with(extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let extra_args = extra_args.iter().map(|a| (*a).to_owned()).collect();
        let mut server = Self { child: None, port, dir, extra_args };
        server.restart();
        server
    }

    /// Starts (again) on the same port, with no data (nothing is persisted).
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (.ci/run installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready(self.port) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Everything the server holds now, as an RDB file written without
    /// compression, so every stored string is there as it was written: what
    /// a test searches for data that must never reach Redis.
    pub fn snapshot(&self) -> Vec<u8> {
        for command in [&["CONFIG", "SET", "rdbcompression", "no"][..], &["SAVE"]] {
            let out = Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(command)
                .output()
                .expect("redis-cli is installed (.ci/run installs it)");
            let reply = String::from_utf8_lossy(&out.stdout);
            assert_eq!(reply.trim(), "OK", "redis-cli {command:?}");
        }
        std::fs::read(self.dir.path().join("dump.rdb")).expect("SAVE wrote dump.rdb")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn ledger(&self) -> RedisLedger {
        let mut config = RedisLedgerConfig::new(self.url());
        config.op_timeout = Duration::from_millis(500);
        RedisLedger::new(&config).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Readiness: the server answers PING.
fn ready(port: u16) -> bool {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "PING"])
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
}
