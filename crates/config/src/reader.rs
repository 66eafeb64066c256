//! The reader of single values: booleans, integers, addresses, URLs, and
//! text given directly, through `NAME_FILE`, or in the data directory. The
//! groups and the validation read through it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gatehouse_capability::{KeyError, Secret};

use crate::problem::Problem;
use crate::source::{Layered, Source};

/// Reads settings from the layered sources, collecting every problem met.
pub(crate) struct Reader<'a> {
    pub(crate) layered: &'a Layered,
    pub(crate) source: &'a dyn Source,
    pub(crate) problems: &'a mut Vec<Problem>,
}

impl Reader<'_> {
    pub(crate) fn problem(&mut self, setting: &str, code: &'static str, message: impl Into<String>) {
        self.problems.push(Problem::new(setting, code, message.into()));
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.layered.get(name)
    }

    pub(crate) fn bool(&mut self, name: &str, default: bool) -> bool {
        match self.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            None => default,
            Some(v) => match v.as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    self.problem(name, "invalid_value", "must be true or false");
                    default
                }
            },
        }
    }

    /// An `http://` or `https://` URL without credentials or a trailing `/`.
    pub(crate) fn http_url(&mut self, name: &str, default: &str) -> String {
        match self.get(name).map(|u| u.trim().trim_end_matches('/').to_owned()) {
            None => default.to_owned(),
            Some(u) if (u.starts_with("http://") || u.starts_with("https://")) && !u.contains('@') => u,
            Some(_) => {
                self.problem(name, "invalid_value", "must be an http:// or https:// URL without credentials");
                default.to_owned()
            }
        }
    }

    pub(crate) fn int(&mut self, name: &str, default: i64, range: std::ops::RangeInclusive<i64>) -> i64 {
        match self.get(name) {
            None => default,
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) if range.contains(&n) => n,
                _ => {
                    let msg = format!("must be an integer from {} to {}", range.start(), range.end());
                    self.problem(name, "invalid_value", msg);
                    default
                }
            },
        }
    }

    pub(crate) fn addr(&mut self, name: &str, default: &str) -> SocketAddr {
        let raw = self.get(name).unwrap_or(default).to_owned();
        parse_addr(&raw).unwrap_or_else(|| {
            self.problem(name, "invalid_value", "must be IP:PORT, e.g. 127.0.0.1:8700");
            parse_addr(default).unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
        })
    }

    /// A value given directly, in a `_FILE`, or (embedded) in the data dir.
    pub(crate) fn setting_text(&mut self, name: &str, embedded: Option<&Path>) -> Option<String> {
        self.text_from(name, embedded, false)
    }

    /// As [`Reader::setting_text`], for a secret: a file it comes from must
    /// be readable by its owner alone, as ssh requires of private keys; a
    /// group- or world-readable one is refused (`file_permissions`).
    pub(crate) fn secret_text(&mut self, name: &str, embedded: Option<&Path>) -> Option<String> {
        self.text_from(name, embedded, true)
    }

    /// A value from `NAME` or `NAME_FILE` (never both), or, in embedded mode,
    /// from the data directory.
    fn text_from(&mut self, name: &str, embedded: Option<&Path>, owner_only: bool) -> Option<String> {
        let file_name = format!("{name}_FILE");
        let direct = self.get(name).map(str::to_owned);
        let file = self.get(&file_name).map(str::to_owned);
        // Which setting names the file, and whether it is the data dir's own.
        let (path, setting, in_data_dir) = match (direct, file) {
            (Some(_), Some(_)) => {
                self.problem(name, "ambiguous_source", format!("set either {name} or {file_name}, not both"));
                return None;
            }
            (Some(v), None) => return Some(v),
            (None, Some(path)) => (PathBuf::from(path.trim()), file_name, false),
            (None, None) => (embedded?.to_path_buf(), name.to_owned(), true),
        };
        let text = match self.source.read_file(&path) {
            Ok(text) => text,
            Err(_) if in_data_dir => return None, // not generated yet
            Err(e) => {
                self.problem(
                    &setting,
                    "unreadable_file",
                    format!("cannot read {}: {}", path.display(), e.kind()),
                );
                return None;
            }
        };
        if owner_only
            && let Some(mode) = self.source.file_mode(&path)
            && mode & 0o077 != 0
        {
            self.problem(
                &setting,
                "file_permissions",
                format!(
                    "{} is accessible to its group or others (mode {:o}): a secret's file must be the owner's alone (chmod 600)",
                    path.display(),
                    mode & 0o777
                ),
            );
            return None;
        }
        Some(text)
    }

    pub(crate) fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some() || self.get(&format!("{name}_FILE")).is_some()
    }

    pub(crate) fn strong_secret(&mut self, name: &str, embedded: Option<&Path>) -> Option<Secret> {
        let text = self.secret_text(name, embedded)?;
        Secret::new(&text)
            .map_err(|_| {
                self.problem(name, "weak_secret", "must be at least 32 bytes of random text (weak_secret)")
            })
            .ok()
    }

    pub(crate) fn key_problem(&mut self, name: &str, e: &KeyError) {
        let code = match e {
            KeyError::Malformed => "key_malformed",
            KeyError::WrongType(_) => "key_wrong_type",
            KeyError::Missing => "missing_required",
        };
        self.problem(name, code, e.to_string());
    }
}

/// `IP:PORT`.
pub(crate) fn parse_addr(s: &str) -> Option<SocketAddr> {
    s.trim().parse().ok()
}
