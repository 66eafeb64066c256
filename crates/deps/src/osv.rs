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
//! [`load_dir`] walks a directory with it, and reads OSV's per-ecosystem
//! `all.zip` exports (a zip of `<ID>.json` files) the same way, each entry
//! named `<zip path>!<entry name>`. Archives are untrusted input: entry and
//! archive sizes are capped on the bytes actually inflated, never on what the
//! headers declare ([`MAX_ADVISORY_BYTES`], [`MAX_ZIP_TOTAL_BYTES`],
//! [`MAX_ZIP_ENTRIES`]), encrypted entries are refused, and entry names are
//! only labels: nothing is ever written to disk.

use std::fs;
use std::io::{BufReader, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

/// The largest advisory file read: 16 MiB. Real ones are a few KB, the
/// largest few hundred KB.
pub const MAX_ADVISORY_BYTES: u64 = 16 << 20;

/// How deep [`load_dir`] descends (symbolic links to directories included).
pub const MAX_DIR_DEPTH: usize = 32;

/// The most bytes inflated from one zip archive, all entries together: 4 GiB.
/// A bound against zip bombs of many entries each under
/// [`MAX_ADVISORY_BYTES`], set far above what an OSV export holds.
pub const MAX_ZIP_TOTAL_BYTES: u64 = 4 << 30;

/// The most entries one zip archive may list: 2,000,000. A bound against
/// archives of countless tiny entries, set far above what an OSV export holds.
pub const MAX_ZIP_ENTRIES: usize = 2_000_000;

/// The longest entry name kept in a [`LoadError`]'s `source_name`, in characters.
const MAX_ENTRY_LABEL_CHARS: usize = 256;

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
    /// Larger than [`MAX_ADVISORY_BYTES`] (a file, or a zip entry once
    /// inflated), deeper than [`MAX_DIR_DEPTH`], or a zip archive with more
    /// than [`MAX_ZIP_ENTRIES`] entries or more than [`MAX_ZIP_TOTAL_BYTES`]
    /// inflated.
    TooLarge,
    /// Not JSON (malformed, truncated, not UTF-8).
    Syntax,
    /// JSON, but not an OSV advisory: a required field missing, a field of
    /// the wrong type, an event that is not exactly one known key, an empty id.
    Structure,
    /// The directory holds no `*.json` file and no `*.zip` archive, or a zip
    /// archive holds no `*.json` entry.
    Empty,
    /// A zip archive that cannot be read: not a zip, truncated, an entry whose
    /// data is corrupt (bad deflate stream, checksum mismatch), an encrypted
    /// entry, or a compression method other than stored and deflate.
    Zip,
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
            Self::Zip => "zip",
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
    let mut out = advisory_sources(dir)?;
    out.retain(|p| has_extension(p, "json"));
    Ok(out)
}

/// Every `*.json` file and `*.zip` archive under `dir`, sorted by path.
fn advisory_sources(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    walk(dir, 0, &mut out)?;
    out.sort();
    Ok(out)
}

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension().is_some_and(|x| x == extension)
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
        } else if meta.is_file() && (has_extension(&path, "json") || has_extension(&path, "zip")) {
            out.push(path);
        }
    }
    Ok(())
}

/// Loads an advisory database: every `*.json` file under `path`
/// (recursively, e.g. `<path>/<Ecosystem>/<ID>.json`) and every `*.json`
/// entry of every `*.zip` archive under it (OSV's exports, e.g.
/// `<path>/npm/all.zip`), in path order, each archive's entries in the
/// archive's order. `path` may also be one zip archive. Other files, and
/// directories and other entries inside archives, are ignored. An archive
/// entry's errors name it `<zip path>!<entry name>`.
///
/// Fails on the first file or entry that cannot be read or is not an OSV
/// advisory, naming it; on a zip archive that is corrupt, truncated, holds an
/// encrypted entry, or is over a cap ([`LoadErrorCode::Zip`],
/// [`LoadErrorCode::TooLarge`]); and with [`LoadErrorCode::Empty`] when there
/// is no `*.json` file or archive at all, or an archive holds no `*.json`
/// entry (a database that is not there must not read as "nothing is
/// vulnerable").
pub fn load_dir(path: &Path) -> Result<Vec<Advisory>, LoadError> {
    let mut advisories = Vec::new();
    let mut failure = None;
    visit_sources(path, &mut |loaded| match loaded {
        Ok(a) => {
            advisories.push(a);
            ControlFlow::Continue(())
        }
        Err(e) => {
            failure = Some(e);
            ControlFlow::Break(())
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(advisories),
    }
}

/// Like [`load_dir`], but reads everything and reports every file and entry
/// that fails (in path order, then archive order) instead of stopping at the
/// first: for diagnosing a broken database. An archive that cannot be opened,
/// or that goes over a cap, is one error and the rest of it is not read. Still
/// all-or-nothing: any error means no advisories.
pub fn load_dir_all(path: &Path) -> Result<Vec<Advisory>, Vec<LoadError>> {
    let mut advisories = Vec::new();
    let mut errors = Vec::new();
    visit_sources(path, &mut |loaded| {
        match loaded {
            Ok(a) => advisories.push(a),
            Err(e) => errors.push(e),
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| vec![e])?;
    if errors.is_empty() { Ok(advisories) } else { Err(errors) }
}

/// What [`visit_sources`] hands each advisory, or the error in its place, to;
/// `Break` stops the walk.
type Visit<'a> = dyn FnMut(Result<Advisory, LoadError>) -> ControlFlow<()> + 'a;

/// Walks the database at `path` (a directory, or one zip archive). Errors
/// that leave nothing to walk (an unreadable or empty directory) are
/// returned; every other error goes to `visit`.
fn visit_sources(path: &Path, visit: &mut Visit<'_>) -> Result<(), LoadError> {
    let name = path.display().to_string();
    let meta = fs::metadata(path).map_err(|e| LoadError::new(LoadErrorCode::Io, &name, e.to_string()))?;
    if meta.is_file() && has_extension(path, "zip") {
        let _ = visit_zip(path, ZipLimits::DEFAULT, visit);
        return Ok(());
    }
    let sources = advisory_sources(path)?;
    if sources.is_empty() {
        return Err(LoadError::new(
            LoadErrorCode::Empty,
            name,
            "no *.json advisory file or *.zip archive in this directory",
        ));
    }
    for source in &sources {
        let flow = if has_extension(source, "zip") {
            visit_zip(source, ZipLimits::DEFAULT, visit)
        } else {
            visit(load_file(source))
        };
        if flow.is_break() {
            break;
        }
    }
    Ok(())
}

/// The caps on one zip archive.
#[derive(Debug, Clone, Copy)]
struct ZipLimits {
    /// Inflated bytes of one entry.
    entry_bytes: u64,
    /// Inflated bytes of all entries together.
    total_bytes: u64,
    /// Entries listed in the central directory.
    entries: usize,
}

impl ZipLimits {
    const DEFAULT: Self =
        Self { entry_bytes: MAX_ADVISORY_BYTES, total_bytes: MAX_ZIP_TOTAL_BYTES, entries: MAX_ZIP_ENTRIES };
}

/// An entry name made safe to print: control characters escaped, at most
/// [`MAX_ENTRY_LABEL_CHARS`] characters. The name is a label only; it never
/// becomes a path.
fn entry_label(name: &str) -> String {
    let mut label = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX_ENTRY_LABEL_CHARS {
            label.push('…');
            break;
        }
        if c.is_control() {
            label.extend(c.escape_default());
        } else {
            label.push(c);
        }
    }
    label
}

/// Reads every `*.json` entry of the zip archive at `path` with
/// [`from_json_bytes`], handing each result to `visit` (which may stop the
/// walk). Archive-level failures (unreadable, over a cap) go to `visit` once
/// and end this archive.
fn visit_zip(path: &Path, limits: ZipLimits, visit: &mut Visit<'_>) -> ControlFlow<()> {
    let zip_name = path.display().to_string();
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return visit(Err(LoadError::new(LoadErrorCode::Io, zip_name, e.to_string()))),
    };
    let mut archive = match zip::ZipArchive::new(BufReader::new(file)) {
        Ok(a) => a,
        Err(e) => {
            return visit(Err(LoadError::new(
                LoadErrorCode::Zip,
                zip_name,
                format!("not a readable zip archive: {e}"),
            )));
        }
    };
    if archive.len() > limits.entries {
        return visit(Err(LoadError::new(
            LoadErrorCode::TooLarge,
            zip_name,
            format!("{} entries, more than the {}-entry limit", archive.len(), limits.entries),
        )));
    }
    let mut total: u64 = 0;
    let mut json_entries = 0usize;
    for index in 0..archive.len() {
        // The central directory's view of the entry, read without touching its data.
        let (label, is_json, encrypted, declared) = match archive.by_index_data(index) {
            Ok(entry) => {
                if entry.is_dir() {
                    continue;
                }
                let name = match entry.name() {
                    Ok(n) => n.into_owned(),
                    Err(_) => String::from_utf8_lossy(entry.name_raw()).into_owned(),
                };
                let is_json = entry.is_file() && name.ends_with(".json");
                (format!("{zip_name}!{}", entry_label(&name)), is_json, entry.encrypted(), entry.size())
            }
            Err(e) => {
                return visit(Err(LoadError::new(
                    LoadErrorCode::Zip,
                    format!("{zip_name}!#{index}"),
                    format!("unreadable entry: {e}"),
                )));
            }
        };
        if encrypted {
            visit(Err(LoadError::new(LoadErrorCode::Zip, label, "an encrypted entry: refused")))?;
            continue;
        }
        if !is_json {
            continue;
        }
        json_entries += 1;
        // A declared size is only believed when it says "too large"; the bytes
        // actually inflated are capped below whatever it says.
        if declared > limits.entry_bytes {
            visit(Err(LoadError::new(
                LoadErrorCode::TooLarge,
                label,
                format!("declares {declared} bytes, more than the {}-byte limit", limits.entry_bytes),
            )))?;
            continue;
        }
        let mut bytes = Vec::new();
        let read = archive.by_index(index).map_err(|e| e.to_string()).and_then(|entry| {
            entry.take(limits.entry_bytes + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())
        });
        if let Err(e) = read {
            visit(Err(LoadError::new(LoadErrorCode::Zip, label, format!("cannot read the entry: {e}"))))?;
            continue;
        }
        total = total.saturating_add(bytes.len() as u64);
        if total > limits.total_bytes {
            return visit(Err(LoadError::new(
                LoadErrorCode::TooLarge,
                zip_name,
                format!("inflates to more than the {}-byte limit", limits.total_bytes),
            )));
        }
        if bytes.len() as u64 > limits.entry_bytes {
            visit(Err(LoadError::new(
                LoadErrorCode::TooLarge,
                label,
                format!("inflates to more than the {}-byte limit", limits.entry_bytes),
            )))?;
            continue;
        }
        visit(from_json_bytes(&label, &bytes))?;
    }
    if json_entries == 0 {
        return visit(Err(LoadError::new(
            LoadErrorCode::Empty,
            zip_name,
            "no *.json entry in this zip archive",
        )));
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};

    use zip::write::{SimpleFileOptions, ZipWriter};

    use super::*;

    fn advisory(id: &str) -> Vec<u8> {
        format!(r#"{{"id": "{id}", "modified": "2024-01-01T00:00:00Z"}}"#).into_bytes()
    }

    /// A zip of `A-1.json` … `A-n.json`, each [`advisory`] sized.
    fn archive(n: usize) -> tempfile::NamedTempFile {
        let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
        for i in 1..=n {
            writer.start_file(format!("A-{i}.json"), SimpleFileOptions::default()).unwrap();
            writer.write_all(&advisory(&format!("A-{i}"))).unwrap();
        }
        let mut file = tempfile::Builder::new().suffix(".zip").tempfile().unwrap();
        file.write_all(&writer.finish().unwrap().into_inner()).unwrap();
        file
    }

    fn load(path: &Path, limits: ZipLimits) -> (Vec<String>, Vec<LoadError>) {
        let (mut ids, mut errors) = (Vec::new(), Vec::new());
        let _ = visit_zip(path, limits, &mut |loaded| {
            match loaded {
                Ok(a) => ids.push(a.id),
                Err(e) => errors.push(e),
            }
            ControlFlow::Continue(())
        });
        (ids, errors)
    }

    #[test]
    fn the_total_inflated_bytes_are_capped_per_archive() {
        let file = archive(3);
        let one = advisory("A-1").len() as u64;
        let (ids, errors) = load(file.path(), ZipLimits { total_bytes: 2 * one, ..ZipLimits::DEFAULT });
        // Two entries fit; the third goes over, and the archive stops there.
        assert_eq!(ids, ["A-1", "A-2"]);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].code, LoadErrorCode::TooLarge);
        assert_eq!(errors[0].source_name, file.path().display().to_string());
        let (ids, errors) = load(file.path(), ZipLimits { total_bytes: 3 * one, ..ZipLimits::DEFAULT });
        assert_eq!((ids.len(), errors.len()), (3, 0));
    }

    #[test]
    fn the_entry_count_is_capped_before_anything_is_read() {
        let file = archive(3);
        let (ids, errors) = load(file.path(), ZipLimits { entries: 2, ..ZipLimits::DEFAULT });
        assert!(ids.is_empty());
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].code, LoadErrorCode::TooLarge);
        assert!(errors[0].message.contains("3 entries"), "{}", errors[0].message);
        let (ids, errors) = load(file.path(), ZipLimits { entries: 3, ..ZipLimits::DEFAULT });
        assert_eq!((ids.len(), errors.len()), (3, 0));
    }

    #[test]
    fn an_entry_over_the_cap_is_refused_by_name() {
        let file = archive(2);
        let limit = advisory("A-1").len() as u64 - 1;
        let (ids, errors) = load(file.path(), ZipLimits { entry_bytes: limit, ..ZipLimits::DEFAULT });
        assert!(ids.is_empty());
        let names: Vec<_> = errors.iter().map(|e| (e.code, e.source_name.clone())).collect();
        let zip = file.path().display();
        assert_eq!(
            names,
            [
                (LoadErrorCode::TooLarge, format!("{zip}!A-1.json")),
                (LoadErrorCode::TooLarge, format!("{zip}!A-2.json"))
            ]
        );
    }

    #[test]
    fn entry_labels_are_escaped_and_bounded() {
        assert_eq!(entry_label("npm/GHSA-1.json"), "npm/GHSA-1.json");
        assert_eq!(entry_label("a\nb\u{7}.json"), "a\\nb\\u{7}.json");
        let long = "x".repeat(1000);
        assert_eq!(entry_label(&long).chars().count(), MAX_ENTRY_LABEL_CHARS + 1);
    }
}
