//! Lockfiles: detection and parsing, from the exact committed bytes.
//!
//! Each format has its own module; all of them produce the same [`Parsed`]:
//! every (ecosystem, name, version) once, sorted, with workspace and
//! local-path packages left out, development dependencies kept, npm aliases
//! under their real name, and PyPI names PEP 503-normalized.
//!
//! Nothing a lockfile pins is dropped for being hard to check: git
//! dependencies are packages with their commit ([`Package::commit`]), and an
//! entry whose version is not one (a URL, a dist-tag) is a package with the
//! version as written, or empty when it is a URL; the scan reports each one
//! it cannot check as an error (see [`crate::scan`]). Only what is not
//! installed from anywhere is left out: the project itself, workspace
//! members and local paths, each by a rule its module documents.
//!
//! Errors name the file and, where known, the line, with a stable
//! [`ParseErrorCode`]. A lockfile that cannot be read is an error, never an
//! empty package list: the gate must not pass on a scan that saw nothing.
//! An entry the parser cannot read fails the whole parse with its line: no
//! partial list. A file that is empty (only whitespace, a byte order mark,
//! and comments where the format has them) is a lockfile with zero packages,
//! whatever its format. Byte order marks and CRLF line ends are read as a
//! text editor writes them; a NUL byte is refused (`syntax`, with its line):
//! no lockfile format is binary.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::package::{Ecosystem, Package};

pub use files::parse_file;

mod cargo;
mod files;
mod gemfile;
mod gomod;
mod gosum;
mod npm;
mod pnpm;
mod poetry;
mod requirements;
mod toml_tables;
mod yarn;

/// The largest lockfile read: 64 MiB. Real ones are a few MB; beyond this
/// the file is refused (`too_large`) rather than parsed.
pub const MAX_LOCKFILE_BYTES: usize = 64 << 20;

/// A lockfile format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// npm `package-lock.json` (lockfileVersion 1, 2, 3).
    NpmPackageLock,
    /// npm `npm-shrinkwrap.json` (same format, published with the package).
    NpmShrinkwrap,
    /// `yarn.lock` written by yarn classic (v1).
    YarnV1,
    /// `yarn.lock` written by yarn Berry (v2 and later): YAML with `__metadata`.
    YarnBerry,
    /// `pnpm-lock.yaml` (lockfileVersion 5.x, 6.x, 9.x).
    Pnpm,
    /// pip `requirements.txt` with exact `==` pins.
    Requirements,
    /// `poetry.lock` (lock-version 1.x and 2.x).
    Poetry,
    /// Go `go.sum`.
    GoSum,
    /// Go `go.mod`, read when no `go.sum` accompanies it.
    GoMod,
    /// `Cargo.lock` (v1-v4).
    CargoLock,
    /// Bundler `Gemfile.lock` (or `gems.locked`).
    GemfileLock,
}

impl Format {
    /// The stable name in `deps parse --json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NpmPackageLock => "npm-package-lock",
            Self::NpmShrinkwrap => "npm-shrinkwrap",
            Self::YarnV1 => "yarn-v1",
            Self::YarnBerry => "yarn-berry",
            Self::Pnpm => "pnpm",
            Self::Requirements => "requirements",
            Self::Poetry => "poetry",
            Self::GoSum => "go-sum",
            Self::GoMod => "go-mod",
            Self::CargoLock => "cargo-lock",
            Self::GemfileLock => "gemfile-lock",
        }
    }

    /// The ecosystem its packages belong to.
    pub fn ecosystem(self) -> Ecosystem {
        match self {
            Self::NpmPackageLock | Self::NpmShrinkwrap | Self::YarnV1 | Self::YarnBerry | Self::Pnpm => {
                Ecosystem::Npm
            }
            Self::Requirements | Self::Poetry => Ecosystem::PyPI,
            Self::GoSum | Self::GoMod => Ecosystem::Go,
            Self::CargoLock => Ecosystem::CratesIo,
            Self::GemfileLock => Ecosystem::RubyGems,
        }
    }
}

/// Why a lockfile could not be read. The codes are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParseErrorCode {
    /// Neither the name nor the content says which format this is.
    UnknownFormat,
    /// The name says one format and the content is another (or none).
    FormatMismatch,
    /// Not UTF-8.
    InvalidUtf8,
    /// Larger than [`MAX_LOCKFILE_BYTES`].
    TooLarge,
    /// The JSON, YAML or TOML (or the format's own syntax) is malformed or truncated.
    Syntax,
    /// Well-formed, but a field the format requires is missing or has the wrong type.
    Structure,
    /// A lockfile version this parser does not know.
    UnsupportedVersion,
    /// A `-r`/`-c` include of a requirements file could not be read.
    IncludeFailed,
    /// A `-r`/`-c` include names a file outside the include root (an
    /// absolute path, a URL, `..` above the root, or a symbolic link that
    /// leads out of it). Not read, and the error names no outside path.
    IncludeOutsideRoot,
}

impl ParseErrorCode {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownFormat => "unknown_format",
            Self::FormatMismatch => "format_mismatch",
            Self::InvalidUtf8 => "invalid_utf8",
            Self::TooLarge => "too_large",
            Self::Syntax => "syntax",
            Self::Structure => "structure",
            Self::UnsupportedVersion => "unsupported_version",
            Self::IncludeFailed => "include_failed",
            Self::IncludeOutsideRoot => "include_outside_root",
        }
    }
}

/// A lockfile that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}{}: {message} ({})", line.map(|l| format!(":{l}")).unwrap_or_default(), code.as_str())]
pub struct ParseError {
    /// Why.
    pub code: ParseErrorCode,
    /// The file, as named by the caller.
    pub file: String,
    /// The 1-based line, where known.
    pub line: Option<usize>,
    /// What is wrong, for a person. Never echoes more than a short excerpt.
    pub message: String,
}

/// Something worth telling that does not stop the parse (an unpinned
/// requirement, for one: it is reported, not silently dropped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// A stable code, e.g. `unpinned`.
    pub code: &'static str,
    /// The 1-based line, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What, for a person.
    pub message: String,
}

/// A parsed lockfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Parsed {
    /// The format.
    pub format: Format,
    /// Every package version once, sorted.
    pub packages: Vec<Package>,
    /// Warnings, in file order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// The text of one lockfile, with its name for errors.
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    /// An error about this file.
    pub fn error(&self, code: ParseErrorCode, line: Option<usize>, message: impl Into<String>) -> ParseError {
        ParseError { code, file: self.file.to_owned(), line, message: message.into() }
    }

    /// A JSON error, with serde_json's line.
    pub fn json_error(&self, e: &serde_json::Error) -> ParseError {
        let code =
            if e.is_syntax() || e.is_eof() { ParseErrorCode::Syntax } else { ParseErrorCode::Structure };
        self.error(code, Some(e.line()), format!("invalid JSON: {}", first_clause(&e.to_string())))
    }

    /// A TOML error with `code` (the caller knows whether the TOML itself or
    /// its shape is wrong), at the line its span starts on. Only the whole
    /// document's parse, the tests' reference, has spans in the text itself.
    #[cfg(test)]
    pub fn toml_error(&self, e: &toml::de::Error, code: ParseErrorCode) -> ParseError {
        let line = e.span().map(|s| self.line_at(s.start));
        self.error(code, line, format!("invalid TOML: {}", first_clause(e.message())))
    }

    /// The 1-based line holding byte `offset` (the last line when past the end).
    pub fn line_at(&self, offset: usize) -> usize {
        self.text.as_bytes().iter().take(offset).filter(|&&b| b == b'\n').count() + 1
    }
}

/// At most 100 characters of a name from a lockfile, control characters
/// dropped: lockfile text in messages stays short and on one line.
pub(crate) fn short_text(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(100).collect()
}

/// An error message up to its first quote: names the problem, never echoes file content.
pub(crate) fn first_clause(msg: &str) -> String {
    msg.split(['"', '`']).next().unwrap_or("").trim_end_matches([' ', ':']).to_owned()
}

/// Gathers packages: deduplicated and sorted by construction.
#[derive(Default)]
pub(crate) struct Collector {
    packages: BTreeSet<Package>,
    warnings: Vec<Warning>,
}

impl Collector {
    pub fn add(&mut self, ecosystem: Ecosystem, name: &str, version: &str) {
        self.packages.insert(Package::new(ecosystem, name, version));
    }

    /// A git dependency: its version (empty when the lockfile records none)
    /// and its commit (when the lockfile records one).
    pub fn add_git(&mut self, ecosystem: Ecosystem, name: &str, version: &str, commit: Option<&str>) {
        self.packages.insert(Package::new(ecosystem, name, version).at_commit(commit));
    }

    pub fn warn(&mut self, code: &'static str, line: Option<usize>, message: impl Into<String>) {
        self.warnings.push(Warning { code, line, message: message.into() });
    }

    /// Adds a warning; returns its index, for [`Collector::drop_warnings`].
    pub fn warn_indexed(&mut self, code: &'static str, line: Option<usize>, message: String) -> usize {
        self.warn(code, line, message);
        self.warnings.len() - 1
    }

    /// Drops the warnings at these indices (a later line made them moot).
    pub fn drop_warnings(&mut self, indices: &BTreeSet<usize>) {
        let mut i = 0;
        self.warnings.retain(|_| {
            i += 1;
            !indices.contains(&(i - 1))
        });
    }

    pub fn finish(self, format: Format) -> Parsed {
        Parsed { format, packages: self.packages.into_iter().collect(), warnings: self.warnings }
    }
}

/// Reads an included file (requirements `-r`, `-c`) by its name relative
/// to the top-level lockfile's directory (the parser has joined the name to
/// the including file's directory). An error is a reason for a person; the
/// parser reports it as `include_failed`, prefixed with the include as written.
///
/// The parser only asks for names inside the lockfile's directory tree
/// (see [`parse_with`]); a callback reading the file system must still keep
/// symbolic links from leading out of it, as [`parse_file`] does.
pub type Includes<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// Why an include was not read: the parser's own callback, which can also
/// say "outside the root" (for a symbolic link leading out).
pub(crate) enum IncludeError {
    /// It could not be read; why, naming nothing outside the root.
    Failed(String),
    /// It resolves outside the include root.
    OutsideRoot,
}

/// Reads an include, by its name relative to the top-level file's directory.
pub(crate) type Reader<'a> = dyn FnMut(&str) -> Result<String, IncludeError> + 'a;

/// The format of `file_name` (a path or a base name) holding `bytes`: by
/// name first, confirmed by content; by content alone when the name says nothing.
pub fn detect(file_name: &str, bytes: &[u8]) -> Result<Format, ParseError> {
    let src = Source { file: file_name, text: "" };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        src.error(ParseErrorCode::InvalidUtf8, Some(line), "not UTF-8")
    })?;
    let by_content = sniff(text);
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    let by_name = match base {
        "package-lock.json" => Some(Format::NpmPackageLock),
        "npm-shrinkwrap.json" => Some(Format::NpmShrinkwrap),
        "yarn.lock" => match by_content {
            Some(f @ (Format::YarnV1 | Format::YarnBerry)) => Some(f),
            _ => Some(Format::YarnV1),
        },
        "pnpm-lock.yaml" => Some(Format::Pnpm),
        "poetry.lock" => Some(Format::Poetry),
        "go.sum" => Some(Format::GoSum),
        "go.mod" => Some(Format::GoMod),
        "Cargo.lock" => Some(Format::CargoLock),
        "Gemfile.lock" | "gems.locked" => Some(Format::GemfileLock),
        // requirements.txt, requirements-dev.txt, and pip-tools' layout
        // (requirements/main.txt).
        name if name.ends_with(".txt")
            && (name.contains("requirements") || file_name.contains("requirements/")) =>
        {
            Some(Format::Requirements)
        }
        _ => None,
    };
    match (by_name, by_content) {
        (Some(named), Some(seen)) if named == seen => Ok(named),
        // package-lock and shrinkwrap share one format.
        (Some(named @ (Format::NpmPackageLock | Format::NpmShrinkwrap)), Some(Format::NpmPackageLock)) => {
            Ok(named)
        }
        // requirements files have no signature; any text that is not another format may be one.
        (Some(Format::Requirements), None) => Ok(Format::Requirements),
        // Nor has go.mod: `module` is optional, and its parser refuses any line it cannot read.
        (Some(Format::GoMod), None) => Ok(Format::GoMod),
        // An empty lockfile of any format holds zero packages.
        (Some(named), None) if is_empty(named, text) => Ok(named),
        (Some(named), Some(seen)) => Err(src.error(
            ParseErrorCode::FormatMismatch,
            None,
            format!("named like a {} lockfile but holds {}", named.as_str(), seen.as_str()),
        )),
        (Some(named), None) => Err(src.error(
            ParseErrorCode::FormatMismatch,
            None,
            format!("named like a {} lockfile but is not one", named.as_str()),
        )),
        (None, Some(seen)) => Ok(seen),
        (None, None) => {
            Err(src.error(ParseErrorCode::UnknownFormat, None, "not a lockfile format gatehouse reads"))
        }
    }
}

/// Whether `text` holds nothing but whitespace, a byte order mark, and
/// comments in the format's own syntax (`#` in YAML, TOML, yarn v1 and
/// requirements files; `//` in go.mod; none in JSON, go.sum and Gemfile.lock).
fn is_empty(format: Format, text: &str) -> bool {
    let comment = match format {
        Format::YarnV1 | Format::YarnBerry | Format::Pnpm | Format::Poetry | Format::CargoLock => "#",
        Format::Requirements => "#",
        Format::GoMod => "//",
        Format::NpmPackageLock | Format::NpmShrinkwrap | Format::GoSum | Format::GemfileLock => "",
    };
    text.trim_start_matches('\u{feff}').lines().all(|l| {
        let l = l.trim();
        l.is_empty() || (!comment.is_empty() && l.starts_with(comment))
    })
}

/// What the content alone says. Cheap: looks at the first lines.
fn sniff(text: &str) -> Option<Format> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let head: String = text.chars().take(4096).collect();
    let trimmed = head.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with('{') {
        return head.contains("\"lockfileVersion\"").then_some(Format::NpmPackageLock);
    }
    if head.contains("# yarn lockfile v1") {
        return Some(Format::YarnV1);
    }
    if head.lines().any(|l| l.starts_with("__metadata:")) {
        return Some(Format::YarnBerry);
    }
    if head.lines().any(|l| l.starts_with("lockfileVersion:")) {
        return Some(Format::Pnpm);
    }
    // Every Cargo.lock since v1 starts with this header, even one with no packages.
    if head.contains("# This file is automatically @generated by Cargo.") {
        return Some(Format::CargoLock);
    }
    // A poetry.lock without dependencies has `package = []` and its `[metadata]`.
    if head.lines().any(|l| l.trim_end() == "[metadata]") && text.contains("content-hash") {
        return Some(Format::Poetry);
    }
    if head.lines().any(|l| l.trim_end() == "[[package]]") || text.contains("\n[[package]]") {
        // Cargo.lock carries `source = "registry+` or `version = N` at the top
        // or `[metadata]` with checksums (v1); poetry.lock carries
        // `python-versions`, `content-hash` or `[package.dependencies]`.
        let poetry = text.contains("python-versions")
            || text.contains("content-hash")
            || head.contains("# This file is automatically @generated by Poetry");
        return Some(if poetry { Format::Poetry } else { Format::CargoLock });
    }
    let gem_section = |s: &str| matches!(s.trim_end(), "GEM" | "GIT" | "PATH" | "PLATFORMS" | "DEPENDENCIES");
    // A Gemfile.lock without sources (no gems) still has DEPENDENCIES and PLATFORMS or BUNDLED WITH.
    let top = |name: &str| head.lines().any(|l| l.trim_end() == name);
    let bundler_footer = top("DEPENDENCIES") && (top("PLATFORMS") || top("BUNDLED WITH"));
    if (head.lines().any(gem_section) && head.contains("  specs:")) || bundler_footer {
        return Some(Format::GemfileLock);
    }
    let first = head.lines().find(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))?;
    if first.starts_with("module ") {
        return Some(Format::GoMod);
    }
    let first = head.lines().find(|l| !l.trim().is_empty())?;
    let fields: Vec<&str> = first.split_whitespace().collect();
    if fields.len() == 3 && fields[1].starts_with('v') && fields[2].starts_with("h1:") {
        return Some(Format::GoSum);
    }
    None
}

/// Parses a lockfile: detection, then the format's parser. `includes`
/// reads files a requirements file includes (`-r`, `-c`); without it, an
/// include is an error.
///
/// Includes are confined to the lockfile's own directory tree: one written
/// as an absolute path or a URL, or whose path, resolved lexically against
/// the including file's directory, leads out of that tree, is refused with
/// `include_outside_root` without calling `includes`, and the error names
/// no path. The tree is the directory of `file_name` as named: an include
/// that climbs out of it and back in through its name
/// (`./../pip/other.txt` from `pip/requirements.txt`) is asked for by its
/// resolved name (`other.txt`); for a bare `file_name` the directory's name
/// is unknown, so any climb above it is refused. `includes` is trusted with
/// the rest; for files on disk use [`parse_file`], which also refuses
/// symbolic links that lead out of the tree.
pub fn parse_with(
    file_name: &str,
    bytes: &[u8],
    includes: Option<&mut Includes<'_>>,
) -> Result<Parsed, ParseError> {
    match includes {
        Some(read) => {
            let mut reader = |name: &str| read(name).map_err(IncludeError::Failed);
            parse_within(file_name, bytes, Some(&mut reader), None, "")
        }
        None => parse_within(file_name, bytes, None, None, ""),
    }
}

/// [`parse_with`] with the parser's own include reader; `within` is the
/// lockfile's directory relative to the include root (`""`, or ending in `/`).
///
/// `root` is the include root's own path, when the caller knows it better
/// than `file_name` tells (a canonical path): what an include that climbs
/// above the root is resolved against; `None` takes `file_name`'s directory.
pub(crate) fn parse_within(
    file_name: &str,
    bytes: &[u8],
    includes: Option<&mut Reader<'_>>,
    root: Option<&str>,
    within: &str,
) -> Result<Parsed, ParseError> {
    if bytes.len() > MAX_LOCKFILE_BYTES {
        let src = Source { file: file_name, text: "" };
        return Err(src.error(
            ParseErrorCode::TooLarge,
            None,
            format!("{} bytes; the limit is {MAX_LOCKFILE_BYTES}", bytes.len()),
        ));
    }
    // Before detection, which would otherwise call such a file another format.
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        let src = Source { file: file_name, text: "" };
        return Err(src.error(ParseErrorCode::Syntax, Some(line), "a NUL byte: not a text lockfile"));
    }
    let format = detect(file_name, bytes)?;
    // detect() has checked UTF-8.
    let text = std::str::from_utf8(bytes).unwrap_or_default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let src = Source { file: file_name, text };
    if is_empty(format, text) {
        return Ok(Collector::default().finish(format));
    }
    match format {
        Format::NpmPackageLock | Format::NpmShrinkwrap => npm::parse(&src, format),
        Format::YarnV1 => yarn::parse_v1(&src),
        Format::YarnBerry => yarn::parse_berry(&src),
        Format::Pnpm => pnpm::parse(&src),
        Format::Requirements => requirements::parse(&src, includes, root, within),
        Format::Poetry => poetry::parse(&src),
        Format::GoSum => gosum::parse(&src),
        Format::GoMod => gomod::parse(&src),
        Format::CargoLock => cargo::parse(&src),
        Format::GemfileLock => gemfile::parse(&src),
    }
}

/// Parses a lockfile that includes nothing.
pub fn parse(file_name: &str, bytes: &[u8]) -> Result<Parsed, ParseError> {
    parse_with(file_name, bytes, None)
}
