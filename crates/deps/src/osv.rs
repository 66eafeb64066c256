//! OSV advisories (<https://ossf.github.io/osv-schema/>): the subset of the
//! schema gatehouse reads, and loading it from disk.
//!
//! Unknown fields are ignored; a field gatehouse reads that has the wrong
//! shape is an error. A JSON `null` reads as an absent field.
//!
//! Loading is all-or-nothing: an advisory database with one unreadable file
//! is an error naming that file ([`LoadError`], with a stable
//! [`LoadErrorCode`]), never a smaller database, because a partial database
//! would answer "no findings" for what it failed to read.
//!
//! [`from_json_bytes`] reads one advisory from bytes and a name for errors;
//! [`load_dir`] walks a directory with it. An archive reader (OSV's
//! `all.zip`) is meant to feed each entry's bytes and name to
//! [`from_json_bytes`] the same way.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

/// The largest advisory file read: 16 MiB. Real ones are a few KB, the
/// largest few hundred KB.
pub const MAX_ADVISORY_BYTES: u64 = 16 << 20;

/// How deep [`load_dir`] descends (symbolic links to directories included).
pub const MAX_DIR_DEPTH: usize = 32;

/// One OSV advisory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advisory {
    /// The schema version it was written with, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// The identifier, e.g. `GHSA-xxxx-xxxx-xxxx`, `PYSEC-2021-1`, `GO-2022-0001`.
    pub id: String,
    /// When it last changed (RFC 3339, UTC). Required by the schema.
    pub modified: String,
    /// When it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
    /// When it was withdrawn; a withdrawn advisory never matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<String>,
    /// The same vulnerability's identifiers in other databases.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Closely related (not identical) vulnerabilities.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<String>,
    /// One line of plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// CommonMark; kept whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
    /// Quantitative severities (CVSS vectors and others).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub severity: Vec<Severity>,
    /// The affected packages and their versions.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub affected: Vec<Affected>,
    /// Links.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    /// The database's own fields (GitHub's `severity`, for one), kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_specific: Option<serde_json::Value>,
}

impl Advisory {
    /// True if the advisory was withdrawn.
    pub fn is_withdrawn(&self) -> bool {
        self.withdrawn.is_some()
    }
}

/// One `severity[]` item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Severity {
    /// `CVSS_V2`, `CVSS_V3`, `CVSS_V4`, `Ubuntu`, or a type added later.
    #[serde(rename = "type")]
    pub kind: String,
    /// The score in that type's notation (a CVSS vector string, for CVSS).
    pub score: String,
}

/// One `affected[]` item: a package and the versions of it that are affected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Affected {
    /// The package; absent only in entries that describe GIT ranges alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<AffectedPackage>,
    /// Per-package severities (when they differ between packages).
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub severity: Vec<Severity>,
    /// Ranges of affected versions.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<Range>,
    /// Affected versions, listed one by one.
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// The ecosystem's own fields (Go's affected symbols, for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecosystem_specific: Option<serde_json::Value>,
    /// The database's own fields for this package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_specific: Option<serde_json::Value>,
}

/// `affected[].package`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AffectedPackage {
    /// The OSV ecosystem string, e.g. `npm`, `PyPI`, `Debian:11`.
    pub ecosystem: String,
    /// The package name as the ecosystem spells it.
    pub name: String,
    /// A Package URL without version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purl: Option<String>,
}

/// `affected[].ranges[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Range {
    /// How to read the event versions.
    #[serde(rename = "type")]
    pub kind: RangeType,
    /// The repository (GIT ranges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The status changes, in any order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub events: Vec<Event>,
    /// The database's own fields for this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_specific: Option<serde_json::Value>,
}

/// `affected[].ranges[].type`. A type this code does not know is kept (the
/// matcher reports it for the packages it names) rather than failing the load.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RangeType {
    /// SemVer 2.0 versions.
    Semver,
    /// The ecosystem's own versions.
    Ecosystem,
    /// Git commit hashes.
    Git,
    /// Any other type.
    Other(String),
}

impl RangeType {
    /// The OSV spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Semver => "SEMVER",
            Self::Ecosystem => "ECOSYSTEM",
            Self::Git => "GIT",
            Self::Other(s) => s,
        }
    }
}

impl Serialize for RangeType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RangeType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(match s.as_str() {
            "SEMVER" => Self::Semver,
            "ECOSYSTEM" => Self::Ecosystem,
            "GIT" => Self::Git,
            _ => Self::Other(s),
        })
    }
}

/// One `events[]` item: exactly one of the four keys. An object with another
/// key, or with two keys, is not OSV and fails the load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The first affected version (`"0"`: before every version).
    Introduced(String),
    /// The first unaffected version after an introduced one.
    Fixed(String),
    /// The last affected version (inclusive).
    LastAffected(String),
    /// An upper limit on the range (exclusive; `"*"`: none).
    Limit(String),
}

impl Event {
    /// The version string, whichever the kind.
    pub fn version(&self) -> &str {
        match self {
            Self::Introduced(v) | Self::Fixed(v) | Self::LastAffected(v) | Self::Limit(v) => v,
        }
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventVisitor;

        impl<'de> serde::de::Visitor<'de> for EventVisitor {
            type Value = Event;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object with exactly one of introduced, fixed, last_affected, limit")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
                use serde::de::Error;
                let Some(key) = map.next_key::<String>()? else {
                    return Err(A::Error::custom("an empty event object"));
                };
                let version: String = map.next_value()?;
                if map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::custom("an event object with more than one key"));
                }
                match key.as_str() {
                    "introduced" => Ok(Event::Introduced(version)),
                    "fixed" => Ok(Event::Fixed(version)),
                    "last_affected" => Ok(Event::LastAffected(version)),
                    "limit" => Ok(Event::Limit(version)),
                    other => Err(A::Error::custom(format_args!(
                        "unknown event {:?}: expected introduced, fixed, last_affected or limit",
                        other.chars().take(32).collect::<String>()
                    ))),
                }
            }
        }

        deserializer.deserialize_map(EventVisitor)
    }
}

/// `references[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// `ADVISORY`, `FIX`, `WEB`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The URL.
    pub url: String,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Why an advisory (or a database of them) could not be loaded. The codes
/// are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadErrorCode {
    /// The file or directory could not be read.
    Io,
    /// Larger than [`MAX_ADVISORY_BYTES`], or deeper than [`MAX_DIR_DEPTH`].
    TooLarge,
    /// Not JSON (malformed, truncated, not UTF-8).
    Syntax,
    /// JSON, but not an OSV advisory: a required field missing, a field of
    /// the wrong type, an event that is not exactly one known key, an empty id.
    Structure,
    /// The directory holds no `*.json` file at all.
    Empty,
}

impl LoadErrorCode {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Io => "io",
            Self::TooLarge => "too_large",
            Self::Syntax => "syntax",
            Self::Structure => "structure",
            Self::Empty => "empty",
        }
    }
}

/// An advisory file (or archive entry, or directory) that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{source_name}: {message} ({})", code.as_str())]
pub struct LoadError {
    /// Why.
    pub code: LoadErrorCode,
    /// The file (or entry) as the caller named it.
    pub source_name: String,
    /// What is wrong, for a person.
    pub message: String,
}

impl LoadError {
    fn new(code: LoadErrorCode, source_name: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code, source_name: source_name.into(), message: message.into() }
    }
}

/// Reads one advisory from JSON bytes. `source_name` names the bytes in
/// errors (a path, or an archive entry's name).
pub fn from_json_bytes(source_name: &str, bytes: &[u8]) -> Result<Advisory, LoadError> {
    if bytes.len() as u64 > MAX_ADVISORY_BYTES {
        return Err(LoadError::new(
            LoadErrorCode::TooLarge,
            source_name,
            format!("{} bytes, more than the {MAX_ADVISORY_BYTES}-byte limit", bytes.len()),
        ));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let advisory: Advisory = serde_json::from_slice(bytes).map_err(|e| {
        let code = match e.classify() {
            serde_json::error::Category::Data => LoadErrorCode::Structure,
            serde_json::error::Category::Io => LoadErrorCode::Io,
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => LoadErrorCode::Syntax,
        };
        LoadError::new(code, source_name, format!("not an OSV advisory: {e}"))
    })?;
    if advisory.id.trim().is_empty() {
        return Err(LoadError::new(LoadErrorCode::Structure, source_name, "empty `id`"));
    }
    Ok(advisory)
}

/// Reads one advisory file.
pub fn load_file(path: &Path) -> Result<Advisory, LoadError> {
    let name = path.display().to_string();
    let meta = fs::metadata(path).map_err(|e| LoadError::new(LoadErrorCode::Io, &name, e.to_string()))?;
    if meta.len() > MAX_ADVISORY_BYTES {
        return Err(LoadError::new(
            LoadErrorCode::TooLarge,
            &name,
            format!("{} bytes, more than the {MAX_ADVISORY_BYTES}-byte limit", meta.len()),
        ));
    }
    let bytes = fs::read(path).map_err(|e| LoadError::new(LoadErrorCode::Io, &name, e.to_string()))?;
    from_json_bytes(&name, &bytes)
}

/// Lists every `*.json` file under `dir`, recursively, in a stable order
/// (sorted by path). Symbolic links are followed, to [`MAX_DIR_DEPTH`].
pub fn json_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    walk(dir, 0, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let io = |e: std::io::Error| LoadError::new(LoadErrorCode::Io, dir.display().to_string(), e.to_string());
    if depth > MAX_DIR_DEPTH {
        return Err(LoadError::new(
            LoadErrorCode::TooLarge,
            dir.display().to_string(),
            format!("directories nested deeper than {MAX_DIR_DEPTH} (a symbolic link loop?)"),
        ));
    }
    for entry in fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let meta = fs::metadata(&path)
            .map_err(|e| LoadError::new(LoadErrorCode::Io, path.display().to_string(), e.to_string()))?;
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if meta.is_file() && path.extension().is_some_and(|x| x == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// Loads every `*.json` file under `dir` (recursively, e.g.
/// `<dir>/<Ecosystem>/<ID>.json`), in path order. Other files are ignored.
///
/// Fails on the first file that cannot be read or is not an OSV advisory,
/// naming it; fails with [`LoadErrorCode::Empty`] when there is no `*.json`
/// file at all (a database that is not there must not read as "nothing is
/// vulnerable").
pub fn load_dir(dir: &Path) -> Result<Vec<Advisory>, LoadError> {
    let files = json_files(dir)?;
    if files.is_empty() {
        return Err(LoadError::new(
            LoadErrorCode::Empty,
            dir.display().to_string(),
            "no *.json advisory file in this directory",
        ));
    }
    files.iter().map(|f| load_file(f)).collect()
}

/// Like [`load_dir`], but reads every file and reports every one that fails
/// (in path order) instead of stopping at the first: for diagnosing a broken
/// database. Still all-or-nothing: any error means no advisories.
pub fn load_dir_all(dir: &Path) -> Result<Vec<Advisory>, Vec<LoadError>> {
    let files = json_files(dir).map_err(|e| vec![e])?;
    if files.is_empty() {
        return Err(vec![LoadError::new(
            LoadErrorCode::Empty,
            dir.display().to_string(),
            "no *.json advisory file in this directory",
        )]);
    }
    let mut advisories = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for f in &files {
        match load_file(f) {
            Ok(a) => advisories.push(a),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(advisories) } else { Err(errors) }
}
