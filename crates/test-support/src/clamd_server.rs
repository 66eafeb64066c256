//! A private `clamd` (the ClamAV daemon) per test, on a free loopback port,
//! killed on drop. Requires `clamd` (Debian `clamav-daemon`, which `.ci/run`
//! installs; found at `/usr/sbin/clamd` or on `PATH`), plus `bash` for the
//! readiness probe and `kill` for pause/resume.
//!
//! Nothing is downloaded: each server loads a two-signature database written
//! into its own temporary directory, matching [`EICAR`] and [`TEST_MARKER`]
//! exactly (whole-content MD5 signatures). clamd reports a signature from such
//! a custom database with [`UNOFFICIAL_SUFFIX`] appended, so the `zINSTREAM`
//! replies are, NUL-terminated:
//!
//! - `stream: Eicar-Test-Signature.UNOFFICIAL FOUND`
//! - `stream: Gatehouse-Test-Marker.UNOFFICIAL FOUND`
//! - `stream: OK`
//! - `INSTREAM size limit exceeded. ERROR` once a chunk would take the stream
//!   past `StreamMaxLength` (a stream of exactly that length is still scanned).

use std::fmt::Write as _;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// The 68-byte EICAR anti-virus test file.
pub const EICAR: &[u8] = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*";
/// The name the harness's database gives [`EICAR`] (clamd appends [`UNOFFICIAL_SUFFIX`]).
pub const EICAR_SIGNATURE: &str = "Eicar-Test-Signature";
/// Harmless text that the harness's clamd nevertheless reports as infected.
pub const TEST_MARKER: &[u8] = b"gatehouse-test-marker: harmless text that the test clamd flags as a virus";
/// The name the harness's database gives [`TEST_MARKER`] (clamd appends [`UNOFFICIAL_SUFFIX`]).
pub const TEST_MARKER_SIGNATURE: &str = "Gatehouse-Test-Marker";
/// What clamd appends to the name of a signature from a database that is not
/// an official, signed `.cvd`: `stream: Eicar-Test-Signature.UNOFFICIAL FOUND`.
pub const UNOFFICIAL_SUFFIX: &str = ".UNOFFICIAL";
/// `StreamMaxLength` of [`ClamdServer::start`]: small, so tests reach it cheaply.
pub const DEFAULT_STREAM_MAX_LENGTH: u64 = 1024 * 1024;

/// `MD5:SIZE:NAME` lines. The digests are of the constants above (checked with
/// `md5sum`); the test suite's scans fail if a constant changes without them.
const DATABASE: &str = "\
44d88612fea8a8f36de82e1278abb02f:68:Eicar-Test-Signature
d2df45eba785332ed6a05d99978005b8:73:Gatehouse-Test-Marker
";

const START_DEADLINE: Duration = Duration::from_secs(30);

pub struct ClamdServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl ClamdServer {
    pub fn start() -> Self {
        Self::with_stream_max_length(DEFAULT_STREAM_MAX_LENGTH)
    }

    /// A server whose `StreamMaxLength` is `bytes`.
    pub fn with_stream_max_length(bytes: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let root = dir.path();
        std::fs::create_dir(root.join("db")).unwrap();
        std::fs::write(root.join("db/gatehouse-test.hdb"), DATABASE).unwrap();
        let mut config = String::new();
        for line in [
            "Foreground yes".to_owned(),
            format!("TCPSocket {port}"),
            "TCPAddr 127.0.0.1".to_owned(),
            format!("DatabaseDirectory {}", root.join("db").display()),
            format!("LogFile {}", root.join("clamd.log").display()),
            "LogTime yes".to_owned(),
            format!("PidFile {}", root.join("clamd.pid").display()),
            format!("TemporaryDirectory {}", root.display()),
            format!("StreamMaxLength {bytes}"),
            // No bytecode.cvd here; and no `User` line: clamd stays the user
            // that started it (root in CI containers), which can read the
            // temporary directory.
            "Bytecode no".to_owned(),
        ] {
            writeln!(config, "{line}").unwrap();
        }
        std::fs::write(root.join("clamd.conf"), config).unwrap();
        let mut server = Self { child: None, port, dir };
        server.restart();
        server
    }

    /// Starts (again) on the same port, with the same configuration.
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let output = File::create(self.dir.path().join("clamd.out")).unwrap();
        let binary = clamd_binary();
        let child = Command::new(&binary)
            .arg(format!("--config-file={}", self.dir.path().join("clamd.conf").display()))
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e}; clamd is installed by .ci/run (Debian package clamav-daemon)",
                    binary.display()
                )
            });
        self.child = Some(child);
        let started = Instant::now();
        while !ready(self.port) {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                self.child = None;
                panic!("clamd exited ({status}) before answering PING\n{}", self.logs());
            }
            assert!(
                started.elapsed() < START_DEADLINE,
                "clamd did not answer PING on {} within {START_DEADLINE:?}\n{}",
                self.addr(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the daemon (SIGSTOP): connections are still accepted by the
    /// kernel, but nothing is answered until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Undoes [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// clamd's log file and what it printed, for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| {
            std::fs::read(self.dir.path().join(name))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("({e})"))
        };
        format!("--- clamd.log ---\n{}--- clamd output ---\n{}", read("clamd.log"), read("clamd.out"))
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("clamd is running").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }
}

impl Drop for ClamdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Debian installs clamd in /usr/sbin, which is not always on `PATH`.
fn clamd_binary() -> PathBuf {
    let sbin = Path::new("/usr/sbin/clamd");
    if sbin.is_file() { sbin.to_owned() } else { PathBuf::from("clamd") }
}

/// Readiness: the server answers `zPING` with `PONG`. Like redis-cli for
/// `RedisServer`, a child process does the dialing (bash's `/dev/tcp`), so
/// this crate's sources keep the one-door lint on with no local exception.
fn ready(port: u16) -> bool {
    const PROBE: &str = r#"exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'zPING\0' >&3 &&
        IFS= read -r -d '' -t 2 reply <&3 && [ "$reply" = PONG ]"#;
    Command::new("bash")
        .args(["-c", PROBE, "clamd-ping", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
