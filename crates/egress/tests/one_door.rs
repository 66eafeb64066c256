//! "Only `egress` may open outbound connections" is enforced by clippy's
//! `disallowed-methods` / `disallowed-types`. These tests make sure the
//! configuration that enforces it cannot silently rot: the constructors stay
//! listed, every other crate denies the lints, and only this crate allows them.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn clippy_toml_forbids_every_way_to_dial_out() {
    let cfg: toml::Table = read(&workspace_root().join("clippy.toml")).parse().expect("clippy.toml is TOML");
    let paths = |key: &str| -> Vec<String> {
        cfg[key].as_array().expect(key).iter().map(|e| e["path"].as_str().expect("path").to_owned()).collect()
    };
    let methods = paths("disallowed-methods");
    for required in [
        "std::net::TcpStream::connect",
        "std::net::TcpStream::connect_timeout",
        "tokio::net::TcpStream::connect",
        "tokio::net::TcpSocket::connect",
        "reqwest::Client::new",
        "reqwest::Client::builder",
        "hyper_util::client::legacy::Client::builder",
        "std::env::set_var",
    ] {
        assert!(methods.iter().any(|m| m == required), "clippy.toml no longer forbids {required}");
    }
    let types = paths("disallowed-types");
    for required in ["reqwest::Client", "hyper_util::client::legacy::Client"] {
        assert!(types.iter().any(|t| t == required), "clippy.toml no longer forbids the type {required}");
    }
}

#[test]
fn only_the_egress_crate_allows_the_forbidden_calls() {
    let crates = workspace_root().join("crates");
    let mut checked = 0;
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        for root in ["src/lib.rs", "src/main.rs"] {
            let path = dir.join(root);
            if !path.exists() {
                continue;
            }
            let text = read(&path);
            let allows = text.contains("#![allow(clippy::disallowed_methods, clippy::disallowed_types)]");
            let denies = text.contains("#![deny(clippy::disallowed_methods, clippy::disallowed_types)]");
            if name == "egress" {
                assert!(allows, "crates/egress/{root} must carry the allow");
            } else {
                assert!(
                    denies && !allows,
                    "crates/{name}/{root} must deny the disallowed lints and not allow them"
                );
            }
            checked += 1;
        }
        // No source file outside egress may switch the rule off locally
        // either, except for test clients that talk to a server under test.
        if name != "egress" {
            for file in rust_files(&dir.join("src")) {
                let text = read(&file);
                assert!(
                    !text.contains("allow(clippy::disallowed_methods")
                        && !text.contains("allow(clippy::disallowed_types"),
                    "{} switches the one-door rule off",
                    file.display()
                );
            }
        }
    }
    assert!(checked >= 5, "expected every crate root to be checked, saw {checked}");
}

/// HTTP client crates, and crates that open sockets for clients: only
/// `crates/egress` may depend on them directly (`redis` is the ledger's
/// infrastructure connection, not a path a run can steer; the server speaks
/// HTTP through axum, which uses hyper for serving only).
const CLIENT_CRATES: &[&str] = &[
    "reqwest",
    "hyper",
    "hyper-util",
    "ureq",
    "isahc",
    "curl",
    "surf",
    "attohttpc",
    "minreq",
    "hickory-resolver",
    "trust-dns-resolver",
];

#[test]
fn no_crate_outside_egress_depends_on_an_http_client() {
    let crates = workspace_root().join("crates");
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let manifest: toml::Table = text.parse().expect("Cargo.toml is TOML");
        if name == "egress" {
            continue;
        }
        // The listener serves HTTP with hyper and opens nothing: the lints
        // (which it denies like every crate) forbid hyper's client calls.
        let serving_only: &[&str] = if name == "listener" { &["hyper", "hyper-util"] } else { &[] };
        // Plain and per-target sections alike; a dependency renamed with
        // `package = "..."` counts under its real name. (Dev-dependencies may
        // hold test clients that talk to a server under test.)
        let targets = manifest.get("target").and_then(|t| t.as_table()).into_iter().flat_map(|t| t.values());
        for table in std::iter::once(&toml::Value::Table(manifest.clone())).chain(targets) {
            for section in ["dependencies", "build-dependencies"] {
                let Some(deps) = table.get(section).and_then(|d| d.as_table()) else { continue };
                for (key, spec) in deps {
                    let real = spec.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                    assert!(
                        !CLIENT_CRATES.contains(&real) || serving_only.contains(&real),
                        "crates/{name} depends on {real} directly; go through gatehouse-egress"
                    );
                }
            }
        }
    }
}

#[test]
fn the_workspace_denies_the_lints_by_default() {
    let manifest: toml::Table = read(&workspace_root().join("Cargo.toml")).parse().expect("Cargo.toml");
    let clippy = &manifest["workspace"]["lints"]["clippy"];
    assert_eq!(clippy["disallowed_methods"].as_str(), Some("deny"));
    assert_eq!(clippy["disallowed_types"].as_str(), Some("deny"));
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}
