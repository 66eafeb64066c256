//! A real browser per test: Debian's `chromedriver` on a free loopback port,
//! driving a headless Chromium with a fresh profile, through fantoccini
//! (WebDriver). Requires `/usr/bin/chromedriver` and `/usr/bin/chromium`
//! (Debian `chromium-driver` and `chromium`, which `.ci/run` installs), and
//! axe-core under `crates/test-support/browser/node_modules` (`.ci/run` runs
//! `npm ci --prefix crates/test-support/browser`).
//!
//! The pages under test are the settings pages a person uses, so a test looks
//! at them as a person's browser does: screenshots land in
//! `target/admin-screenshots/` for a human (or the file tool) to look at, and
//! [`Browser::axe_violations`] runs the axe-core accessibility rules on the
//! rendered page.
//!
//! Stop it with [`Browser::close`] (async: it ends the WebDriver session, so
//! Chromium shuts down cleanly); dropping it without closing still stops
//! chromedriver, with SIGTERM.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::ClientBuilder;
use fantoccini::error::NewSessionError;
/// Re-exported, so a suite drives the page without a fantoccini dependency of
/// its own (and at the harness's version).
pub use fantoccini::{self, Client, Locator};
use serde_json::{Value, json};

use crate::free_port;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
const INSTALL_HINT: &str = ".ci/run installs them: apt-get install chromium chromium-driver";
/// chromedriver starts in well under a second; a loaded CI machine (two cores
/// shared with a build) gets a generous margin, not an endless wait.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Chromium's switches. Headless, and silent on the network: the machines
/// reach package registries only, and traffic to any other address is
/// watched for. Even with `--disable-background-networking` Debian's Chromium
/// still looks up accounts.google.com, update.googleapis.com,
/// content-autofill.googleapis.com, optimizationguide-pa.googleapis.com and
/// its default search engine (seen with strace), so the resolver rules make
/// every name but `localhost` unresolvable; `MAP *` matches IP literals too,
/// hence the exclusion of 127.0.0.1, where the servers under test listen.
/// `--disable-dev-shm-usage` because containers give /dev/shm 64 MiB, which
/// Chromium outgrows and then crashes on; `--no-sandbox` because the tests run
/// as root, where Chromium refuses to start sandboxed. The window is tall so a
/// whole settings page fits in one screenshot (WebDriver's is the viewport).
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-features=OptimizationHints,AutofillServerCommunication,MediaRouter,Translate",
    "--no-pings",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    "--window-size=1280,2000",
];

pub struct Browser {
    /// `None` once [`Browser::close`] has ended the session.
    client: Option<Client>,
    /// `None` once stopped.
    chromedriver: Option<Child>,
    /// The Chromium profile (`--user-data-dir`) and chromedriver's log; removed
    /// on drop, after chromedriver (and so Chromium) has stopped.
    dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and opens a session: a fresh headless Chromium.
    /// Panics (a test never skips) when chromedriver or Chromium is missing or
    /// does not come up.
    pub async fn start() -> Self {
        for binary in [CHROMEDRIVER, CHROMIUM] {
            assert!(Path::new(binary).exists(), "{binary} is missing; {INSTALL_HINT}");
        }
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        std::fs::create_dir(&profile).unwrap();
        let log = dir.path().join("chromedriver.log");
        let port = free_port();
        let chromedriver = Command::new(CHROMEDRIVER)
            // A process group of its own, which the Chromium it launches
            // joins: stopping signals the group, so no browser outlives the
            // harness (Chromium's crash handlers leave it, and exit with it).
            .process_group(0)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{CHROMEDRIVER} did not start ({e}); {INSTALL_HINT}"));
        let mut browser = Self { client: None, chromedriver: Some(chromedriver), dir };

        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        // Only the connector of fantoccini's TLS feature can be had here (it
        // speaks plain HTTP too); see Cargo.toml.
        let mut builder = ClientBuilder::rustls().expect("the system's root certificates load");
        builder.capabilities(capabilities);
        let url = format!("http://127.0.0.1:{port}");

        // Readiness: fantoccini's own connection attempts, retried while
        // nothing listens yet. (This crate may not dial sockets itself: the
        // one-door lints.) A chromedriver that answers but cannot start
        // Chromium fails at once, with its word and its log.
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            match builder.connect(&url).await {
                Ok(client) => {
                    browser.client = Some(client);
                    return browser;
                }
                Err(NewSessionError::Failed(_) | NewSessionError::FailedC(_) | NewSessionError::Lost(_))
                    if Instant::now() < deadline =>
                {
                    if let Some(status) = browser.chromedriver.as_mut().unwrap().try_wait().unwrap() {
                        panic!("chromedriver exited ({status}) before it answered\n{}", browser.log());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("no WebDriver session from chromedriver: {e}\n{}", browser.log()),
            }
        }
    }

    /// The WebDriver session: `goto`, `find`, `form`, `execute`, …
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("the browser is open")
    }

    /// Writes a PNG of the viewport (1280 wide; the 2000-high window leaves
    /// about 1860 for the page) to
    /// `<target>/admin-screenshots/<name>.png` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client().screenshot().await.expect("a screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Runs axe-core's rules on the current page and returns its `violations`
    /// (each has `id`, `impact`, `help`, and `nodes` with their `target`
    /// selectors and `html`). The script goes in through WebDriver's execute,
    /// which Chromium runs outside the page's Content-Security-Policy, so the
    /// pages keep theirs (no inline or remote scripts) while under test.
    pub async fn axe_violations(&self) -> Vec<Value> {
        let source = std::fs::read_to_string(axe_path()).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `npm ci --prefix crates/test-support/browser` (which .ci/run does)",
                axe_path().display()
            )
        });
        // Evaluated as a function body: axe's bundle assigns `window.axe`.
        let loaded = self
            .client()
            .execute(&format!("{source}\n;return typeof window.axe;"), vec![])
            .await
            .expect("axe-core injects");
        assert_eq!(loaded, json!("object"), "axe-core did not load into the page");
        let result = self
            .client()
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 window.axe.run(document).then(
                     (results) => done({ violations: results.violations }),
                     (error) => done({ error: String(error) }),
                 );",
                vec![],
            )
            .await
            .expect("axe.run answers");
        if let Some(error) = result.get("error") {
            panic!("axe.run failed: {error}");
        }
        match result.get("violations") {
            Some(Value::Array(violations)) => violations.clone(),
            _ => panic!("axe.run returned no violations array: {result}"),
        }
    }

    /// Ends the WebDriver session (Chromium quits), then stops chromedriver.
    pub async fn close(mut self) {
        if let Some(client) = self.client.take() {
            // A session that is already gone is no failure of the test.
            let _ = client.close().await;
        }
        self.stop_chromedriver();
    }

    /// SIGTERM to chromedriver's process group, which holds Chromium too:
    /// chromedriver alone would leave a browser that was never told to quit
    /// (dropped without [`Browser::close`]) running, orphaned. SIGTERM, not
    /// SIGKILL: Chromium then shuts down its own child processes, where a
    /// SIGKILL would strand them. `kill(1)` sends it, since the workspace
    /// forbids `unsafe` (and so a direct `kill(2)`). Waits until the group is
    /// gone, so the profile is not removed under a running browser.
    fn stop_chromedriver(&mut self) {
        let Some(mut child) = self.chromedriver.take() else { return };
        let group = format!("-{}", child.id());
        let signal = |sig: &str| {
            Command::new("kill")
                .args([sig, "--", &group])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // chromedriver is reaped here, so `kill -0` then sees only Chromium.
            let _ = child.try_wait();
            if !signal("-0") {
                break;
            }
            if Instant::now() >= deadline {
                signal("-KILL");
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.wait();
    }

    /// chromedriver's log, for a panic message.
    fn log(&self) -> String {
        let path = self.dir.path().join("chromedriver.log");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        format!("--- {} (last 40 lines) ---\n{}", path.display(), tail.join("\n"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.stop_chromedriver();
    }
}

/// Where [`Browser::screenshot`] writes: the workspace's target directory
/// (`CARGO_TARGET_DIR` when set), under `admin-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    };
    target.join("admin-screenshots")
}

fn axe_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/node_modules/axe-core/axe.min.js")
}
