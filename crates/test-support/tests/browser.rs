//! The real-browser harness, against a page served the way the settings pages
//! are: under `Content-Security-Policy: default-src 'none'`, so no inline or
//! remote script of the page's own runs. The harness must still read the
//! page, screenshot it and run axe-core in it; the one unlabelled field must
//! be axe's one finding (proof that axe really ran its rules).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use gatehouse_test_support::Browser;
use gatehouse_test_support::browser::Locator;

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Harness self-test</title></head>
<body>
<main>
<h1>Browser harness self-test</h1>
<form method="post" action="/save">
  <label for="name">Display name</label>
  <input id="name" name="name" type="text">
  <input name="unlabelled" type="text">
  <button type="submit">Save</button>
</form>
<p id="inline-marker">the inline script did not run</p>
<script>document.getElementById("inline-marker").textContent = "the inline script ran";</script>
</main>
</body>
</html>
"#;

/// A one-page HTTP/1.1 server on a loopback port, on a thread that lives as
/// long as the test process: `/` is [`PAGE`], anything else a 404.
fn serve_page() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // The rest of the head; a GET has no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let path = request_line.split(' ').nth(1).unwrap_or("");
            let (status, body) =
                if path == "/" { ("200 OK", PAGE) } else { ("404 Not Found", "not found\n") };
            let response = format!(
                "HTTP/1.1 {status}\r\n\
                 Content-Type: text/html; charset=utf-8\r\n\
                 Content-Security-Policy: default-src 'none'\r\n\
                 Content-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    format!("http://{addr}/")
}

#[tokio::test]
async fn the_browser_reads_screenshots_and_checks_a_page_under_a_strict_csp() {
    let url = serve_page();
    let browser = Browser::start().await;
    browser.client().goto(&url).await.unwrap();

    let heading = browser.client().find(Locator::Css("h1")).await.unwrap().text().await.unwrap();
    assert_eq!(heading, "Browser harness self-test");
    // The policy is in force: the page's own inline script was refused.
    let marker = browser.client().find(Locator::Id("inline-marker")).await.unwrap().text().await.unwrap();
    assert_eq!(marker, "the inline script did not run");

    let path = browser.screenshot("harness-self-test").await;
    let png = std::fs::read(&path).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    // IHDR: the width is the window's.
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 1280, "screenshot width");

    let violations = browser.axe_violations().await;
    let ids: Vec<&str> = violations.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["label"], "axe's findings: {violations:#?}");
    let targets: Vec<String> =
        violations[0]["nodes"].as_array().unwrap().iter().map(|n| n["target"].to_string()).collect();
    assert_eq!(targets, [r#"["input[name=\"unlabelled\"]"]"#], "the unlabelled input alone");

    let profile = profile_dir(&browser);
    assert!(!processes_with(&profile).is_empty(), "Chromium runs with {profile}");
    browser.close().await;
    assert_no_browser_left(&profile);
}

/// Drop cannot end the WebDriver session (that is async): stopping
/// chromedriver's process group must take Chromium down with it all the same.
#[tokio::test]
async fn a_browser_dropped_without_close_still_stops() {
    let browser = Browser::start().await;
    browser.client().goto("about:blank").await.unwrap();
    let profile = profile_dir(&browser);
    assert!(!processes_with(&profile).is_empty(), "Chromium runs with {profile}");
    drop(browser);
    assert_no_browser_left(&profile);
}

/// Chromium's profile directory, as chromedriver reports it for the session.
fn profile_dir(browser: &Browser) -> String {
    let capabilities = browser.client().capabilities().expect("the session's capabilities");
    capabilities["chrome"]["userDataDir"].as_str().expect("chrome.userDataDir").to_owned()
}

/// The command lines of the processes that run with that profile.
fn processes_with(profile: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(profile) {
            found.push(cmdline);
        }
    }
    found
}

/// No process runs with that profile, and the profile is gone.
fn assert_no_browser_left(profile: &str) {
    assert_eq!(processes_with(profile), Vec::<String>::new(), "still running");
    assert!(!std::path::Path::new(profile).exists(), "{profile} was not removed");
}
