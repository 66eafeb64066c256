//! A private S3-compatible server per test: moto in server mode (PyPI
//! `moto[server]`, which `.ci/run` installs), on a free loopback port,
//! killed on drop. Its state is in memory: a stopped server comes back
//! empty, so an outage is made with [`S3Server::stop`] and the test's
//! objects are gone after it.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

pub struct S3Server {
    child: Option<Child>,
    port: u16,
    /// Served over TLS with this certificate and key, checked against this CA.
    tls: Option<Tls>,
    /// Requests moto takes unsigned before it verifies every signature
    /// (`INITIAL_NO_AUTH_ACTION_COUNT`); `None`: it never does.
    unsigned_actions: Option<u32>,
}

struct Tls {
    key: std::path::PathBuf,
    cert: std::path::PathBuf,
    ca: std::path::PathBuf,
}

impl S3Server {
    pub fn start() -> Self {
        let mut server = Self { child: None, port: free_port(), tls: None, unsigned_actions: None };
        server.restart();
        server
    }

    /// An S3 (and IAM) server over TLS on 127.0.0.1 that, after its first
    /// `unsigned_actions` requests (creating the IAM user and its access
    /// key), verifies the Signature Version 4 of every request against the
    /// keys its IAM holds and refuses a mismatch: moto's own verification,
    /// botocore recomputing the signature.
    pub fn verifying_signatures(
        key: &std::path::Path,
        cert: &std::path::Path,
        ca: &std::path::Path,
        unsigned_actions: u32,
    ) -> Self {
        let tls = Tls { key: key.to_owned(), cert: cert.to_owned(), ca: ca.to_owned() };
        let mut server =
            Self { child: None, port: free_port(), tls: Some(tls), unsigned_actions: Some(unsigned_actions) };
        server.restart();
        server
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts (again) on the same port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let mut command = Command::new("moto_server");
        command.args(["-H", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(tls) = &self.tls {
            command.arg("-c").arg(&tls.cert).arg("-k").arg(&tls.key);
        }
        if let Some(count) = self.unsigned_actions {
            command.env("INITIAL_NO_AUTH_ACTION_COUNT", count.to_string());
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("moto_server is installed (.ci/run installs PyPI moto[server])");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.answers() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The endpoint, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The settings a client needs besides the endpoint: test credentials
    /// (moto accepts any), a region, and plain HTTP allowed on loopback.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint_url", self.endpoint()),
            ("aws_access_key_id", "testing".into()),
            ("aws_secret_access_key", "testing".into()),
            ("aws_region", "us-east-1".into()),
            ("aws_allow_http", "true".into()),
        ]
    }

    /// The same settings as environment variables (`AWS_ENDPOINT_URL`, ...),
    /// for a child process.
    pub fn env(&self) -> Vec<(String, String)> {
        self.settings().into_iter().map(|(k, v)| (k.to_ascii_uppercase(), v)).collect()
    }

    /// Creates `bucket` (S3's `CreateBucket`, which moto takes unsigned).
    pub fn create_bucket(&self, bucket: &str) {
        let out = Command::new("curl")
            .args(["-s", "-S", "-f", "-X", "PUT", &format!("{}/{bucket}", self.endpoint())])
            .output()
            .expect("curl is installed");
        assert!(out.status.success(), "CreateBucket {bucket}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The keys of every object in `bucket` (`ListObjectsV2`, first page).
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let out = Command::new("curl")
            .args(["-s", "-S", "-f", &format!("{}/{bucket}?list-type=2", self.endpoint())])
            .output()
            .expect("curl is installed");
        assert!(out.status.success(), "ListObjectsV2 {bucket}: {}", String::from_utf8_lossy(&out.stderr));
        let listing = String::from_utf8_lossy(&out.stdout);
        listing.split("<Key>").skip(1).filter_map(|s| s.split("</Key>").next()).map(str::to_owned).collect()
    }

    /// The keys of the incomplete multipart uploads in `bucket`
    /// (`ListMultipartUploads`, first page), one per upload.
    pub fn multipart_uploads(&self, bucket: &str) -> Vec<String> {
        let out = Command::new("curl")
            .args(["-s", "-S", "-f", &format!("{}/{bucket}?uploads", self.endpoint())])
            .output()
            .expect("curl is installed");
        assert!(
            out.status.success(),
            "ListMultipartUploads {bucket}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listing = String::from_utf8_lossy(&out.stdout);
        listing
            .split("<Upload>")
            .skip(1)
            .filter_map(|u| u.split("<Key>").nth(1)?.split("</Key>").next())
            .map(str::to_owned)
            .collect()
    }

    /// Whether it answers: its own API, which no service counts as an
    /// action (so the unsigned ones are left for the test).
    fn answers(&self) -> bool {
        let mut curl = Command::new("curl");
        curl.args(["-s", "-o", "/dev/null", "-f", "--max-time", "2"]);
        if let Some(tls) = &self.tls {
            curl.arg("--cacert").arg(&tls.ca);
        }
        curl.arg(format!("{}/moto-api/", self.endpoint())).status().is_ok_and(|s| s.success())
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
