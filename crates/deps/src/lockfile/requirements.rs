//! pip requirements files, as pip's "Requirements File Format" reads them.
//!
//! Lines are processed in pip's order: a line ending in `\` is joined with the
//! next (backslashes at both ends of a continued line dropped, as pip does; a
//! whole-line comment never continues), then comments are removed (`#` at
//! the start of a line or after whitespace), then blank lines are skipped.
//! A joined line keeps the number of its first physical line.
//!
//! Each remaining line is one of:
//!
//! - an options line (starts with `-`): `-r`/`--requirement` includes
//!   another requirements file through the `includes` callback;
//!   `-c`/`--constraint` a constraints file (see below); `-e`/`--editable`
//!   is an editable (local or VCS) install, reported `unpinned`; index and install options
//!   (`--index-url`, `-i`, `--extra-index-url`, `--find-links`, `-f`,
//!   `--trusted-host`, `--pre`, `--no-binary`, ...) are skipped; an option
//!   pip does not accept is skipped with an `unsupported_option` warning.
//! - a requirement (PEP 508), up to the first word starting with `-` (pip's
//!   rule; what follows, like `--hash=...`, are per-requirement options).
//!   Extras are dropped and environment markers are not evaluated, so a
//!   package pinned twice under different markers yields both versions.
//!   Only `==` without a wildcard and `===` are exact pins; anything else
//!   (`>=`, `~=`, `==1.*`, ranges, a bare name, `name @ url`) is reported as
//!   an `unpinned` warning with its line, not silently dropped.
//! - a URL or a local path (`./pkg`, `foo.whl`): an `unpinned` warning.
//!
//! A line that is none of these (a requirement pip would refuse, such as
//! `asdf==` or `foo 1.0`) is a `syntax` error: pip would refuse the whole
//! file, and a garbage file must not read as "no packages". A requirement
//! using an environment variable (`${VAR}`) cannot be resolved here and is
//! reported `unpinned`. An empty file, or one holding only comments and
//! options, is legitimately empty.
//!
//! Constraints (`-c`), as pip reads them: a constraints file says which
//! version a requirement gets, never that something is installed. So a name
//! that appears only in constraints files is not a package; a constraint's
//! exact pins (`==`, `===`) are packages for each name the requirements name
//! (an unpinned requirement so pinned is no longer `unpinned`; a pinned one
//! given a different pin, which pip would refuse, gets both versions
//! checked); a constraint without an exact pin pins nothing. A `-r` inside a
//! constraints file includes requirements, as pip's parser does. Names are
//! compared PEP 503-normalized, and order does not matter: constraints apply
//! to requirements read before or after them. A constraints file that cannot
//! be read (missing, unreadable, no callback) is a
//! `constraints_not_read` warning at its line, not an error: without it,
//! nothing is checked that would not be, and the requirements it would have
//! pinned are each reported `unpinned`. One outside the include root is
//! still `include_outside_root`, as for `-r`: the confinement has no
//! exceptions.
//!
//! Includes: the callback gets the name as written for the top-level file's
//! includes; an include inside an included file is joined to that file's
//! directory first (pip resolves it relative to the including file), so the
//! callback can always resolve names relative to the top-level file.
//!
//! Includes are confined to the include root: the top-level file's own
//! directory and everything below it, unless the caller names a root above
//! it (see [`parse_file`](super::parse_file)). An include written as an
//! absolute path (`/x`, `\\x`, `C:x`), as a URL (`https://...`, `file:...`),
//! or whose path leads out of the root is `include_outside_root` at its line,
//! and the callback is not called; so is one the callback reports as outside
//! (a symbolic link leading out, found by [`parse_file`](super::parse_file)).
//! That error names no path and is the same whether the target exists or not.
//! A path is judged once resolved lexically (`.` dropped, `name/..`
//! removed) against the including file's directory: one that climbs above
//! the root and comes straight back in through the root's own name
//! (`./../pip/other.txt` in `pip/requirements.txt`) is inside, and the
//! callback is asked for it by its resolved name (`other.txt`, relative to
//! the top-level file as always). That needs the root's name: the caller's
//! (a canonical path, from [`parse_file`](super::parse_file)), or else the
//! top-level file's directory as its name gives it; when neither names it
//! (`requirements.txt` alone), any climb above the root is refused.
//!
//! Without a callback, or when it fails, the include is `include_failed` at
//! its line. Nesting deeper than
//! [`MAX_INCLUDE_DEPTH`] is `include_failed`; a file already read (by its
//! lexically normalized path) with the same content is not read again, which
//! ends include cycles (warned `include_cycle`) and diamond includes.
//! Errors inside an included file name that file.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Collector, Format, IncludeError, MAX_LOCKFILE_BYTES, ParseError, ParseErrorCode, Parsed, Reader, Source,
};
use crate::package::Ecosystem;

/// How deep `-r`/`-c` includes may nest.
pub(crate) const MAX_INCLUDE_DEPTH: usize = 10;

/// How many included files one parse reads at most.
const MAX_INCLUDED_FILES: usize = 1000;

/// The error for an include outside the include root: the same words
/// whatever the include names, so it tells nothing about the file system.
const OUTSIDE_ROOT: &str = "an include outside the include root (the lockfile's directory tree) is not read";

/// Parses a requirements file. `within` is the top-level file's directory
/// relative to the include root (`""` when they are the same, otherwise
/// ending in `/`): how far `..` may climb. `root` is the include root's own
/// path when the caller knows it (else the top-level file's directory, as
/// named): what a path that climbs above the root may come back in through.
pub(crate) fn parse(
    src: &Source<'_>,
    includes: Option<&mut Reader<'_>>,
    root: Option<&str>,
    within: &str,
) -> Result<Parsed, ParseError> {
    let root_dir = dir_of(src.file).to_owned();
    let root_path = lexical_parts(root.unwrap_or(&root_dir)).into_iter().map(str::to_owned).collect();
    let mut state = State {
        includes,
        within: within.to_owned(),
        root_path,
        out: Collector::default(),
        seen: BTreeSet::new(),
        stack: Vec::new(),
        root_dir,
        files_read: 0,
        bytes_read: src.text.len(),
        required: Vec::new(),
        constraints: BTreeMap::new(),
    };
    let key = normalize(src.file);
    state.seen.insert((key.clone(), src.text.to_owned(), false));
    state.stack.push(key);
    state.read(src, "", None, 0, false)?;
    Ok(state.finish())
}

struct State<'i, 'c> {
    includes: Option<&'i mut Reader<'c>>,
    /// The top-level file's directory below the include root.
    within: String,
    /// The include root's own path, lexically normalized (empty when not
    /// known).
    root_path: Vec<String>,
    out: Collector,
    /// Files read: (normalized path, content, read as constraints).
    seen: BTreeSet<(String, String, bool)>,
    /// The normalized paths of the files being read, outermost first.
    stack: Vec<String>,
    /// The top-level file's directory, to normalize include paths against.
    root_dir: String,
    files_read: usize,
    bytes_read: usize,
    /// Named requirements (PEP 503-normalized), with the index of their
    /// `unpinned` warning when no exact pin was given (dropped if a
    /// constraint pins them).
    required: Vec<(String, Option<usize>)>,
    /// Exact pins from constraints files, by PEP 503-normalized name.
    constraints: BTreeMap<String, BTreeSet<String>>,
}

impl State<'_, '_> {
    /// Applies the constraints: each pins the names the requirements name
    /// (pinned or not: a conflicting pin, which pip would refuse, is one more
    /// version checked); a requirement no constraint pins stays `unpinned`.
    fn finish(mut self) -> Parsed {
        let mut pinned = BTreeSet::new();
        for (name, unpinned) in std::mem::take(&mut self.required) {
            if let Some(pins) = self.constraints.get(&name) {
                for v in pins {
                    self.out.add(Ecosystem::PyPI, &name, v);
                }
                pinned.extend(unpinned);
            }
        }
        self.out.drop_warnings(&pinned);
        self.out.finish(Format::Requirements)
    }

    /// Reads one file. `dir` is its directory as the callback knows it ("" for
    /// the top-level file); `label` names an included file in warnings;
    /// `constraint` says it was included with `-c`.
    fn read(
        &mut self,
        src: &Source<'_>,
        dir: &str,
        label: Option<&str>,
        depth: usize,
        constraint: bool,
    ) -> Result<(), ParseError> {
        let warn_prefix = label.map(|l| format!("{}: ", excerpt(l, 200))).unwrap_or_default();
        if let Some(at) = src.text.find('\0') {
            return Err(src.error(
                ParseErrorCode::Syntax,
                Some(src.line_at(at)),
                "a NUL byte: not a text file",
            ));
        }
        for (n, line) in logical_lines(src.text) {
            let line = strip_comment(&line).trim();
            if line.is_empty() {
                continue;
            }
            if line.starts_with('-') {
                self.options_line(src, line, n, dir, &warn_prefix, depth, constraint)?;
            } else {
                self.requirement_line(src, line, n, &warn_prefix, constraint)?;
            }
        }
        Ok(())
    }

    fn requirement_line(
        &mut self,
        src: &Source<'_>,
        line: &str,
        n: usize,
        prefix: &str,
        constraint: bool,
    ) -> Result<(), ParseError> {
        // pip: the requirement is every word before the first one starting with `-`.
        let req = line[..option_start(line)].trim();
        let marker_sep = if is_url(req) { "; " } else { ";" };
        let req = req.split_once(marker_sep).map_or(req, |(r, _marker)| r).trim();
        if has_env_var(req) {
            if !constraint {
                self.out.warn(
                    "unpinned",
                    Some(n),
                    format!("{prefix}a requirement using an environment variable"),
                );
            }
            return Ok(());
        }
        let (name, exact, unpinned) = match requirement(req) {
            Some(Requirement { name, spec: Spec::Versions(clauses) }) => {
                let exact: Vec<&str> = clauses.iter().filter(|c| c.is_exact()).map(|c| c.version).collect();
                let message =
                    format!("{prefix}{} is not pinned to an exact version (==)", excerpt(name, 100));
                let unpinned = exact.is_empty().then_some(message);
                (name, exact, unpinned)
            }
            Some(Requirement { name, spec: Spec::None }) => {
                (name, Vec::new(), Some(format!("{prefix}{} has no version", excerpt(name, 100))))
            }
            Some(Requirement { name, spec: Spec::Url }) => (
                name,
                Vec::new(),
                Some(format!(
                    "{prefix}{} is a direct URL reference, not a pinned version",
                    excerpt(name, 100)
                )),
            ),
            None if is_url(req) || looks_like_path(req) => {
                if !constraint {
                    self.out.warn("unpinned", Some(n), format!("{prefix}a URL or local path requirement"));
                }
                return Ok(());
            }
            None => {
                return Err(src.error(ParseErrorCode::Syntax, Some(n), "not a requirement pip accepts"));
            }
        };
        let key = crate::package::normalize_pypi_name(name);
        if constraint {
            if !exact.is_empty() {
                self.constraints.entry(key).or_default().extend(exact.iter().map(|v| (*v).to_owned()));
            }
            return Ok(());
        }
        for v in exact {
            self.out.add(Ecosystem::PyPI, name, v);
        }
        let warning = unpinned.map(|message| self.out.warn_indexed("unpinned", Some(n), message));
        self.required.push((key, warning));
        Ok(())
    }

    #[allow(clippy::too_many_arguments, reason = "one call site, each argument named")]
    fn options_line(
        &mut self,
        src: &Source<'_>,
        line: &str,
        n: usize,
        dir: &str,
        prefix: &str,
        depth: usize,
        constraint: bool,
    ) -> Result<(), ParseError> {
        let words = shell_words(line);
        let mut words = words.iter().map(String::as_str);
        while let Some(word) = words.next() {
            let Some(opt) = option(word) else {
                // pip parses options lines with optparse and ignores stray arguments.
                self.out.warn(
                    "ignored_argument",
                    Some(n),
                    format!("{prefix}text after options is ignored, as pip does"),
                );
                continue;
            };
            let value =
                if opt.inline.is_some() || !opt.kind.takes_value() { opt.inline } else { words.next() };
            if opt.kind.takes_value() && value.is_none_or(str::is_empty) {
                return Err(src.error(ParseErrorCode::Syntax, Some(n), "an option without its value"));
            }
            match (opt.kind, value) {
                // pip reads `-r` as requirements even inside a constraints file.
                (Opt::Requirement, Some(name)) => self.include(src, n, name, dir, depth, false)?,
                (Opt::Constraint, Some(name)) => self.include(src, n, name, dir, depth, true)?,
                (Opt::Editable, _) if !constraint => self.out.warn(
                    "unpinned",
                    Some(n),
                    format!("{prefix}an editable (-e) requirement, not a pinned version"),
                ),
                (Opt::Unknown, _) => self.out.warn(
                    "unsupported_option",
                    Some(n),
                    format!("{prefix}an option pip does not accept in requirements files, skipped"),
                ),
                _ => {}
            }
        }
        Ok(())
    }

    fn include(
        &mut self,
        src: &Source<'_>,
        n: usize,
        written: &str,
        dir: &str,
        depth: usize,
        constraint: bool,
    ) -> Result<(), ParseError> {
        // A constraints file that cannot be read only leaves requirements
        // unpinned (each one warned): a warning, not an error.
        let skip = |this: &mut Self, e: ParseError| {
            if constraint && e.code == ParseErrorCode::IncludeFailed {
                this.out.warn(
                    "constraints_not_read",
                    Some(n),
                    format!("-c: {}; its pins are not applied", e.message),
                );
                Ok(())
            } else {
                Err(e)
            }
        };
        let fail = |message: String| src.error(ParseErrorCode::IncludeFailed, Some(n), message);
        let outside = || src.error(ParseErrorCode::IncludeOutsideRoot, Some(n), OUTSIDE_ROOT);
        // Confined before anything else is looked at; the including file's
        // directory (`dir`) is inside the root, as every include read was.
        let name = if dir.is_empty() { written.to_owned() } else { join(dir, written) };
        // Past leading `./` too: `./C:x` is `C:x` once joined, `./https://x` a URL.
        let absolute = |s: &str| is_absolute(s) || is_absolute(past_dot_slashes(s));
        if absolute(written) || absolute(&name) {
            return skip(self, outside());
        }
        // Above the root: inside only if it comes straight back in, and then
        // asked for by its resolved name.
        let name = if escapes(&format!("{}{name}", self.within)) {
            // Resolved, it is checked again: `..\\a\\c:x` from `a/` is `c:x`.
            match back_inside(&self.root_path, &self.within, &name) {
                Some(resolved) if !absolute(&resolved) => resolved,
                _ => return skip(self, outside()),
            }
        } else {
            name
        };
        let shown = excerpt(written, 200);
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(fail(format!("{shown}: includes nest deeper than {MAX_INCLUDE_DEPTH}")));
        }
        if self.files_read >= MAX_INCLUDED_FILES {
            return Err(fail(format!("{shown}: more than {MAX_INCLUDED_FILES} included files")));
        }
        let Some(read) = self.includes.as_deref_mut() else {
            return skip(self, fail(format!("{shown}: includes are not read here")));
        };
        let text = match read(&name) {
            Ok(text) => text,
            Err(IncludeError::Failed(e)) => {
                return skip(self, fail(format!("{shown}: {}", excerpt(&e, 200))));
            }
            Err(IncludeError::OutsideRoot) => return skip(self, outside()),
        };
        self.files_read += 1;
        self.bytes_read = self.bytes_read.saturating_add(text.len());
        if self.bytes_read > MAX_LOCKFILE_BYTES {
            return Err(fail(format!("{shown}: included files exceed {MAX_LOCKFILE_BYTES} bytes in all")));
        }
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let key = normalize(&format!("{}{name}", self.root_dir));
        if !self.seen.insert((key.clone(), text.to_owned(), constraint)) {
            // Read before with the same content: nothing new to find.
            if self.stack.contains(&key) {
                self.out.warn("include_cycle", Some(n), format!("{shown} includes itself; read once"));
            }
            return Ok(());
        }
        self.stack.push(key);
        let included = Source { file: &name, text };
        let result = self.read(&included, dir_of(&name), Some(&name), depth + 1, constraint);
        self.stack.pop();
        result
    }
}

/// pip's `join_lines`: (first line number, joined line).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let comment = raw.trim_start().starts_with('#');
        if !raw.ends_with('\\') || comment {
            // pip prefixes a comment with a space so that it stays a comment when joined.
            let piece = if comment { format!(" {raw}") } else { raw.to_owned() };
            match pending.take() {
                Some((start, mut acc)) => {
                    acc.push_str(&piece);
                    out.push((start, acc));
                }
                None => out.push((n, piece)),
            }
        } else {
            let piece = raw.trim_matches('\\');
            match &mut pending {
                Some((_, acc)) => acc.push_str(piece),
                None => pending = Some((n, piece.to_owned())),
            }
        }
    }
    out.extend(pending);
    out
}

/// The line up to a `#` that starts it or follows whitespace.
fn strip_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// Where per-requirement options start: the first word beginning with `-`.
fn option_start(line: &str) -> usize {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '-' && prev_space {
            return i;
        }
        prev_space = c.is_whitespace();
    }
    line.len()
}

/// `${NAME}` as pip expands it (upper-case letters, digits, `_`).
fn has_env_var(s: &str) -> bool {
    s.match_indices("${").any(|(i, _)| {
        let rest = s.get(i + 2..).unwrap_or("");
        let name_len =
            rest.bytes().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_').count();
        name_len > 0 && rest.as_bytes().get(name_len) == Some(&b'}')
    })
}

/// A URL: `scheme://...` (including `git+https://`) or `file:...`.
fn is_url(s: &str) -> bool {
    if s.starts_with("file:") {
        return true;
    }
    let Some((scheme, _)) = s.split_once("://") else {
        return false;
    };
    // Looser than RFC 3986 (a scheme starts with a letter) on purpose: an
    // include such as `.a://x` is refused as a URL rather than read as a path.
    !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// pip's `_looks_like_path`, and archive file names.
fn looks_like_path(s: &str) -> bool {
    const ARCHIVES: [&str; 12] = [
        ".whl",
        ".zip",
        ".tar.gz",
        ".tgz",
        ".tar",
        ".tar.bz2",
        ".tbz",
        ".tar.xz",
        ".txz",
        ".tar.lz",
        ".tlz",
        ".tar.lzma",
    ];
    s.contains(['/', '\\']) || s.starts_with('.') || ARCHIVES.iter().any(|a| s.ends_with(a))
}

fn is_absolute(s: &str) -> bool {
    s.starts_with(['/', '\\']) || is_url(s) || s.as_bytes().get(1) == Some(&b':')
}

/// Whether a relative path, read lexically with `/` and `\` as separators,
/// climbs above the directory it starts from.
fn escapes(path: &str) -> bool {
    let mut depth = 0usize;
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// A path's components, lexically normalized: `/` and `\\` separate, `.`
/// and empty components are dropped, `name/..` is removed; a leading `..`
/// of a relative path stays, and `..` at the top of an absolute one is
/// dropped (it stays at `/`). An absolute path's first component is `/`.
fn lexical_parts(path: &str) -> Vec<&str> {
    let absolute = path.starts_with(['/', '\\']);
    let mut parts: Vec<&str> = if absolute { vec!["/"] } else { Vec::new() };
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&p) if p != ".." && p != "/" => {
                    parts.pop();
                }
                Some(&"/") => {}
                _ => parts.push(".."),
            },
            _ => parts.push(part),
        }
    }
    parts
}

/// An include `name` (relative to the top-level file, which is `within`
/// below the root) that climbs above the root: resolved lexically against
/// the root's own path `root`, the name of the same file relative to the
/// top-level file without climbing above the root, if it lands inside the
/// root (below it, not on it); `None` otherwise, or when the root's path is
/// not known.
fn back_inside(root: &[String], within: &str, name: &str) -> Option<String> {
    if root.is_empty() {
        return None;
    }
    let root_text = root.join("/");
    let path = format!("{root_text}/{within}{name}");
    let full = lexical_parts(&path);
    // `root` is normalized: a prefix of the normalized full path when the
    // path is inside it (an absolute root's "/" joins to "//", read as "/").
    let inside = full.len() > root.len() && full.iter().zip(root).all(|(a, b)| a == b);
    // Below a relative root that starts with `..`, a further `..` is above it.
    let below: Vec<&str> = full.get(root.len()..).unwrap_or_default().to_vec();
    if !inside || below.contains(&"..") {
        return None;
    }
    // Relative to the top-level file's directory (`within` below the root).
    let within = lexical_parts(within);
    let common = within.iter().zip(&below).take_while(|(a, b)| a == b).count();
    let mut out: Vec<&str> = vec![".."; within.len() - common];
    out.extend(&below[common..]);
    Some(out.join("/"))
}

/// `s` without its leading `./` (or `.\\`) segments.
fn past_dot_slashes(mut s: &str) -> &str {
    while let Some(rest) = s.strip_prefix("./").or_else(|| s.strip_prefix(".\\")) {
        s = rest;
    }
    s
}

/// A path's directory with its trailing separator ("" for a bare name).
fn dir_of(path: &str) -> &str {
    path.rfind(['/', '\\']).map_or("", |i| &path[..=i])
}

/// `dir` (ending in a separator) and a relative `path`, without `.` segments
/// (`..` is left for the callback: only the file system knows what it means).
fn join(dir: &str, path: &str) -> String {
    let joined = format!("{dir}{path}");
    let kept: Vec<&str> = joined.split('/').filter(|p| *p != ".").collect();
    if kept.iter().all(|p| p.is_empty()) { joined } else { kept.join("/") }
}

/// A path with `.` and `name/..` removed, `/` as the separator.
fn normalize(path: &str) -> String {
    let absolute = path.starts_with(['/', '\\']);
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|p| *p != "..") => {
                parts.pop();
            }
            ".." if absolute => {}
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    if absolute { format!("/{joined}") } else { joined }
}

/// At most `max` characters of `s`, for messages.
fn excerpt(s: &str, max: usize) -> String {
    let mut out: String = s.chars().filter(|c| !c.is_control()).take(max).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// Words split as a shell would (quotes group, backslash escapes), like pip's `shlex.split`.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => word.extend(chars.next()),
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                word.extend(chars.next());
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Opt {
    /// `-r`: another requirements file.
    Requirement,
    /// `-c`: a constraints file.
    Constraint,
    /// `-e`: an editable install.
    Editable,
    /// A known option with a value, skipped.
    SkipValue,
    /// A known flag, skipped.
    SkipFlag,
    /// Not an option pip accepts in a requirements file.
    Unknown,
}

impl Opt {
    fn takes_value(self) -> bool {
        matches!(self, Self::Requirement | Self::Constraint | Self::Editable | Self::SkipValue)
    }
}

struct ParsedOpt<'a> {
    kind: Opt,
    inline: Option<&'a str>,
}

/// One option word: `--name`, `--name=value`, `-x`, `-xvalue`; `None` if not an option.
fn option(word: &str) -> Option<ParsedOpt<'_>> {
    if let Some(long) = word.strip_prefix("--") {
        let (name, inline) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        let kind = match name {
            "requirement" => Opt::Requirement,
            "constraint" => Opt::Constraint,
            "editable" => Opt::Editable,
            "index-url" | "extra-index-url" | "find-links" | "no-binary" | "only-binary" | "trusted-host"
            | "use-feature" | "hash" | "global-option" | "config-settings" | "install-option" => {
                Opt::SkipValue
            }
            "no-index" | "prefer-binary" | "require-hashes" | "pre" => Opt::SkipFlag,
            _ => Opt::Unknown,
        };
        // A flag given a value, or an unknown option: its text is not a value to read.
        let inline = if kind == Opt::SkipFlag || kind == Opt::Unknown { None } else { inline };
        return Some(ParsedOpt { kind, inline });
    }
    let short = word.strip_prefix('-')?;
    let mut chars = short.chars();
    let letter = chars.next()?;
    let rest = chars.as_str();
    let kind = match letter {
        'r' => Opt::Requirement,
        'c' => Opt::Constraint,
        'e' => Opt::Editable,
        'i' | 'f' | 'C' => Opt::SkipValue,
        _ => Opt::Unknown,
    };
    let inline = match kind {
        Opt::Unknown => None,
        _ if rest.is_empty() => None,
        _ => Some(rest.strip_prefix('=').unwrap_or(rest)),
    };
    Some(ParsedOpt { kind, inline })
}

struct Requirement<'a> {
    name: &'a str,
    spec: Spec<'a>,
}

enum Spec<'a> {
    /// A bare name.
    None,
    /// `name @ url`.
    Url,
    /// Version clauses.
    Versions(Vec<Clause<'a>>),
}

struct Clause<'a> {
    op: &'a str,
    version: &'a str,
}

impl Clause<'_> {
    fn is_exact(&self) -> bool {
        self.op == "===" || (self.op == "==" && !self.version.contains('*'))
    }
}

/// A PEP 508 requirement without its marker: `name [extras] spec` or
/// `name [extras] @ url`. `None` if it is not one.
fn requirement(s: &str) -> Option<Requirement<'_>> {
    let s = s.trim();
    let name_len =
        s.bytes().take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')).count();
    let name = &s[..name_len];
    let alnum_edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if !alnum_edge(name.bytes().next()) || !alnum_edge(name.bytes().last()) {
        return None;
    }
    let mut rest = s[name_len..].trim_start();
    if let Some(after) = rest.strip_prefix('[') {
        let (extras, after) = after.split_once(']')?;
        let extras_ok = extras.split(',').map(str::trim).all(|e| {
            e.is_empty() || e.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
        if !extras_ok {
            return None;
        }
        rest = after.trim_start();
    }
    if let Some(url) = rest.strip_prefix('@') {
        let url = url.trim();
        return (!url.is_empty() && !url.contains(char::is_whitespace))
            .then_some(Requirement { name, spec: Spec::Url });
    }
    if rest.is_empty() {
        return Some(Requirement { name, spec: Spec::None });
    }
    let spec = match rest.strip_prefix('(') {
        Some(inner) => inner.strip_suffix(')')?,
        None => rest,
    };
    let clauses = spec.split(',').map(clause).collect::<Option<Vec<_>>>()?;
    Some(Requirement { name, spec: Spec::Versions(clauses) })
}

/// `op version`.
fn clause(s: &str) -> Option<Clause<'_>> {
    const OPS: [&str; 8] = ["===", "==", "!=", "<=", ">=", "~=", "<", ">"];
    let s = s.trim();
    let op = OPS.into_iter().find(|op| s.starts_with(op))?;
    let version = s[op.len()..].trim();
    let ok = if op == "===" {
        !version.is_empty()
            && !version.contains(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')'))
    } else {
        version.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && version
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'!' | b'*'))
    };
    ok.then_some(Clause { op, version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_above_the_root_come_back_in_only_through_its_name() {
        assert_eq!(lexical_parts("./a/../b//c/."), ["b", "c"]);
        assert_eq!(lexical_parts("../a/../../b"), ["..", "..", "b"]);
        assert_eq!(lexical_parts("/../a\\b/.."), ["/", "a"]);
        let root = |p: &str| lexical_parts(p).into_iter().map(str::to_owned).collect::<Vec<_>>();
        let pip = root("/srv/repo/pip");
        assert_eq!(back_inside(&pip, "", "../pip/other.txt").as_deref(), Some("other.txt"));
        assert_eq!(back_inside(&pip, "", "sub/../../pip/x/y.txt").as_deref(), Some("x/y.txt"));
        assert_eq!(back_inside(&pip, "", "../pip2/other.txt"), None);
        assert_eq!(back_inside(&pip, "", "../pip"), None, "the root itself is no file");
        assert_eq!(back_inside(&pip, "", "../../repo/pip/../x.txt"), None);
        // `within`: the answer is relative to the top-level file's directory.
        assert_eq!(back_inside(&pip, "a/b/", "../../../pip/a/x.txt").as_deref(), Some("../x.txt"));
        assert_eq!(back_inside(&pip, "a/b/", "../../../pip/c/x.txt").as_deref(), Some("../../c/x.txt"));
        // A root whose name is not known, or that is only `..`s.
        assert_eq!(back_inside(&[], "", "../pip/x.txt"), None);
        assert_eq!(back_inside(&root("../"), "", "../x.txt"), None);
        assert_eq!(back_inside(&root("../pip/"), "", "../pip/x.txt").as_deref(), Some("x.txt"));
    }

    #[test]
    fn joins_like_pip() {
        let lines = logical_lines(
            "foo==\\\n\\\n \\\n  \\\n1.2.3\nbar == 4.5\\\\\n.6\nbaz == 7.8.9 # \\\nbaz == 1.2.3\n",
        );
        let lines: Vec<(usize, &str)> = lines.iter().map(|(n, l)| (*n, strip_comment(l).trim())).collect();
        assert_eq!(lines, [(1, "foo==   1.2.3"), (6, "bar == 4.5.6"), (8, "baz == 7.8.9")]);
        assert_eq!(logical_lines("# c \\\nx==1"), [(1, " # c \\".to_owned()), (2, "x==1".to_owned())]);
        assert_eq!(logical_lines("x==1 \\"), [(1, "x==1 ".to_owned())]);
    }

    #[test]
    fn comments() {
        assert_eq!(strip_comment("a==1 # c"), "a==1 ");
        assert_eq!(strip_comment("# c"), "");
        assert_eq!(strip_comment("git+https://x/y#egg=z"), "git+https://x/y#egg=z");
        assert_eq!(strip_comment("a==1\t#c"), "a==1\t");
    }

    #[test]
    fn requirements() {
        fn exact(s: &str) -> Option<(&str, Vec<&str>)> {
            match requirement(s) {
                Some(Requirement { name, spec: Spec::Versions(c) }) => {
                    Some((name, c.iter().filter(|c| c.is_exact()).map(|c| c.version).collect()))
                }
                _ => None,
            }
        }
        assert_eq!(exact("Twisted[http2]==17.5.0"), Some(("Twisted", vec!["17.5.0"])));
        assert_eq!(exact("celery [redis, pytest] == 4.4.7"), Some(("celery", vec!["4.4.7"])));
        assert_eq!(exact("yolo===1.0"), Some(("yolo", vec!["1.0"])));
        assert_eq!(exact("a==1.*"), Some(("a", vec![])));
        assert_eq!(exact("a>=1,<2"), Some(("a", vec![])));
        assert_eq!(exact("a (==1.0)"), Some(("a", vec!["1.0"])));
        assert_eq!(exact("a==1.0+local.1"), Some(("a", vec!["1.0+local.1"])));
        assert!(requirement("asdf==").is_none());
        assert!(requirement("==1.0").is_none());
        assert!(requirement("asdf 1.0").is_none());
        assert!(requirement("foo==1.0 junk").is_none());
        assert!(requirement("-foo").is_none());
        assert!(matches!(requirement("u @ https://x/y.zip"), Some(Requirement { spec: Spec::Url, .. })));
        assert!(matches!(requirement("flask"), Some(Requirement { spec: Spec::None, .. })));
    }

    #[test]
    fn options() {
        fn kind(w: &str) -> Option<(Opt, Option<&str>)> {
            option(w).map(|o| (o.kind, o.inline))
        }
        assert_eq!(kind("-r"), Some((Opt::Requirement, None)));
        assert_eq!(kind("-rother.txt"), Some((Opt::Requirement, Some("other.txt"))));
        assert_eq!(kind("--requirement=a.txt"), Some((Opt::Requirement, Some("a.txt"))));
        assert_eq!(kind("--constraint"), Some((Opt::Constraint, None)));
        assert_eq!(kind("--pre"), Some((Opt::SkipFlag, None)));
        assert_eq!(kind("--bogus=1"), Some((Opt::Unknown, None)));
        assert_eq!(kind("-foo==1.0"), Some((Opt::SkipValue, Some("oo==1.0"))));
        assert_eq!(kind("x"), None);
        assert_eq!(shell_words(r#"-r "a b.txt" -i 'x' c\ d"#), ["-r", "a b.txt", "-i", "x", "c d"]);
    }

    #[test]
    fn paths() {
        assert_eq!(normalize("./a/../b/./c.txt"), "b/c.txt");
        assert_eq!(normalize("../pip/../pip/x.txt"), "../pip/x.txt");
        assert_eq!(normalize("/a/../../b"), "/b");
        assert_eq!(dir_of("a/b/c.txt"), "a/b/");
        assert_eq!(dir_of("c.txt"), "");
        assert_eq!(join("./", "./x.txt"), "x.txt");
        assert_eq!(join("a/./b/", "../c/./d.txt"), "a/b/../c/d.txt");
        assert!(!escapes("a.txt") && !escapes("sub/../a.txt") && !escapes("./a/./b/../../c"));
        assert!(escapes("../a.txt") && escapes("sub/../../a.txt") && escapes("a\\..\\..\\b"));
        assert!(!escapes("dir/sub/../../x.txt") && escapes("dir/../../x.txt"));
        assert!(is_absolute("/etc/passwd") && is_absolute("C:x") && is_absolute("\\\\srv\\s"));
        assert!(is_absolute("https://x/r.txt") && is_absolute("file:r.txt"));
        assert_eq!(past_dot_slashes("././.\\C:x"), "C:x");
        assert_eq!(past_dot_slashes("./sub/./x"), "sub/./x");
        assert!(has_env_var("x==${VERSION_1}"));
        assert!(!has_env_var("x==${lower}"));
        assert!(!has_env_var("x==$"));
    }
}
