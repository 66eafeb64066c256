//! Reading a TOML lockfile (`Cargo.lock`, `poetry.lock`) one `[[package]]`
//! table at a time.
//!
//! Why: `toml::from_str` builds the whole document before it deserializes
//! anything, and that document costs 17x (Cargo.lock) to 24x (poetry.lock)
//! the text: a 25 MiB lockfile peaked at 446 and 632 MB. Here the text is
//! split at its top-level table headers and each `[[package]]` table (with
//! its own sub-tables, `[package.source]`) is parsed alone, so only one
//! package's document is alive at a time; everything else (the root keys,
//! `[metadata]`, `[patch.unused]`, ...) is parsed as one document of its own
//! pieces, in their order.
//!
//! The split follows the TOML grammar: a header is a `[` that starts a line
//! (after spaces or tabs) outside any multi-line string and outside any
//! array or inline table still open. Comments and strings are skipped so
//! that neither a `[[package]]` inside a string nor a bracket in one moves
//! the split. Where the text is malformed the split can only be coarser
//! (an unclosed array or string keeps what follows in the same piece), never
//! finer, so a piece is parsed as the whole document would parse it.
//!
//! The result is the whole-document parse's, errors included (a unit test
//! holds the two equal on generated lockfiles):
//!
//! - a syntax error anywhere wins: `toml` checks a document's grammar
//!   before it builds its tables, so the first grammar error in the text,
//!   else the first error building them (a duplicate key, a table defined
//!   twice);
//! - then a wrong shape (`structure`): the rest's first (it sorts before
//!   `package` in the document's keys, as `metadata` does), then the first
//!   package's, in file order;
//! - then what the caller finds wrong in a package, the first in file order,
//!   handed back beside the rest for the caller to order after its own
//!   checks of the rest (Cargo.lock's `version` comes first).
//!
//! Lines are those of the original text: every piece knows where it came from.
//!
//! One thing only the whole document shows: `package` defined before the first
//! `[[package]]` (a root key, a `[package]` or `[package.x]` table), which the
//! first `[[package]]` then redefines. That is malformed TOML; the pieces up to
//! and including the first `[[package]]` are parsed together to report it.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;

use super::{ParseError, ParseErrorCode, Source};

/// A document made of pieces of the lockfile's text, in the text's order,
/// with where each piece came from.
pub(super) struct Pieces<'a> {
    text: Cow<'a, str>,
    /// (start in `text`, start in the lockfile) of each piece, ascending.
    starts: Vec<(usize, usize)>,
}

impl<'a> Pieces<'a> {
    fn new(whole: &'a str, ranges: &[Range<usize>]) -> Self {
        match ranges {
            [] => Pieces { text: Cow::Borrowed(""), starts: vec![(0, 0)] },
            [one] => Pieces { text: Cow::Borrowed(&whole[one.clone()]), starts: vec![(0, one.start)] },
            more => {
                let mut text = String::with_capacity(more.iter().map(|r| r.len()).sum());
                let mut starts = Vec::with_capacity(more.len());
                for r in more {
                    starts.push((text.len(), r.start));
                    text.push_str(&whole[r.clone()]);
                }
                Pieces { text: Cow::Owned(text), starts }
            }
        }
    }

    /// The lockfile's offset of this document's offset `at`.
    pub(super) fn original(&self, at: usize) -> usize {
        let i = self.starts.partition_point(|&(doc, _)| doc <= at).saturating_sub(1);
        self.starts.get(i).map_or(at, |&(doc, orig)| orig + (at - doc))
    }
}

/// What [`read`] found besides the packages it handed to the caller.
pub(super) struct Read<'a, R> {
    /// Everything but the `[[package]]` tables, deserialized.
    pub rest: R,
    /// The document `rest` came from, for its spans' lines.
    pub rest_doc: Pieces<'a>,
    /// Whether any `[[package]]` table was read.
    pub any_package: bool,
    /// The first package the caller refused, to be returned after the
    /// caller's own checks of `rest`.
    pub refused: Option<ParseError>,
}

/// One `[[package]]` table and its sub-tables, alone.
#[derive(Deserialize)]
struct One<P> {
    package: Vec<Spanned<P>>,
}

/// Reads `src` as `R` (everything but the `[[package]]` tables) and hands
/// each `[[package]]` table, as `P`, to `each` with the lockfile offset of its
/// header, in file order, until `each` refuses one or the TOML is wrong.
pub(super) fn read<'a, R, P>(
    src: &Source<'a>,
    mut each: impl FnMut(&P, usize) -> Result<(), ParseError>,
) -> Result<Read<'a, R>, ParseError>
where
    R: DeserializeOwned,
    P: DeserializeOwned,
{
    let split = split(src.text);
    let mut errors = Errors::default();
    if let Some(first) = split.packages.first()
        && (split.package_before || root_defines_package(src.text, split.root_end))
    {
        // `package` defined before the first `[[package]]`, which redefines
        // it: the pieces up to it and the first `[[package]]` parsed together
        // give the document's error (or an earlier one).
        let mut ranges: Vec<Range<usize>> =
            split.rest.iter().filter(|r| r.start < first.first.start).cloned().collect();
        ranges.push(first.first.clone());
        let doc = Pieces::new(src.text, &ranges);
        match toml::from_str::<toml::Table>(&doc.text) {
            Err(e) => {
                errors.note(src, &doc, &e);
            }
            Ok(_) => errors.note_semantic(
                first.first.start,
                src.error(
                    ParseErrorCode::Syntax,
                    Some(src.line_at(first.first.start)),
                    "invalid TOML: duplicate key",
                ),
            ),
        }
    }
    let mut refused: Option<ParseError> = None;
    for chunk in &split.packages {
        let doc = Pieces::new(src.text, &chunk.ranges());
        match toml::from_str::<One<P>>(&doc.text) {
            Ok(one) => {
                if refused.is_none() && errors.is_empty() {
                    for p in &one.package {
                        if let Err(e) = each(p.get_ref(), doc.original(p.span().start)) {
                            refused = Some(e);
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                errors.note(src, &doc, &e);
                if errors.grammar.is_some() {
                    // Later tables only hold later errors, or ones TOML reports after it.
                    break;
                }
            }
        }
    }
    let rest_doc = Pieces::new(src.text, &split.rest);
    let mut rest_structure = None;
    let rest = match toml::from_str::<R>(&rest_doc.text) {
        Ok(rest) => Some(rest),
        Err(e) => {
            rest_structure = errors.note(src, &rest_doc, &e);
            None
        }
    };
    if let Some((_, err)) = errors.grammar.or(errors.semantic) {
        return Err(err);
    }
    // The document's keys are read in order (`metadata` before `package`).
    if let Some(err) = rest_structure.or(errors.structure) {
        return Err(err);
    }
    match rest {
        Some(rest) => Ok(Read { rest, rest_doc, any_package: !split.packages.is_empty(), refused }),
        // Unreachable: the rest's error was noted. Kept an error all the same.
        None => Err(src.error(ParseErrorCode::Syntax, None, "invalid TOML")),
    }
}

/// The errors of the pieces, kept in the order `toml` reports a whole
/// document's: it first checks the grammar of all of it, then builds the
/// tables (duplicate keys, a table defined twice, escapes, numbers); the
/// first of the first kind wins, then the first of the second, then the
/// first wrong shape.
#[derive(Default)]
struct Errors {
    /// The first grammar error: (lockfile offset, error).
    grammar: Option<(usize, ParseError)>,
    /// The first other syntax error.
    semantic: Option<(usize, ParseError)>,
    /// The first wrong shape among the packages.
    structure: Option<ParseError>,
}

impl Errors {
    fn is_empty(&self) -> bool {
        self.grammar.is_none() && self.semantic.is_none() && self.structure.is_none()
    }

    /// Notes `e`, from parsing `doc`; a wrong shape is also handed back.
    fn note(&mut self, src: &Source<'_>, doc: &Pieces<'_>, e: &toml::de::Error) -> Option<ParseError> {
        match toml::from_str::<toml::Table>(&doc.text) {
            Err(syntax) => {
                let at = syntax.span().map_or(0, |s| doc.original(s.start));
                let err = toml_error(src, doc, &syntax, ParseErrorCode::Syntax);
                if grammar_fails(&doc.text) {
                    keep_first(&mut self.grammar, at, err);
                } else {
                    self.note_semantic(at, err);
                }
                None
            }
            Ok(_) => {
                let mut err = toml_error(src, doc, e, ParseErrorCode::Structure);
                // Serde names the missing field (ours, not the file's): keep it.
                if let Some(field) =
                    e.message().strip_prefix("missing field `").and_then(|r| r.split('`').next())
                {
                    err.message = format!("missing field `{field}`");
                }
                self.structure.get_or_insert(err.clone());
                Some(err)
            }
        }
    }

    fn note_semantic(&mut self, at: usize, err: ParseError) {
        keep_first(&mut self.semantic, at, err);
    }
}

fn keep_first(slot: &mut Option<(usize, ParseError)>, at: usize, err: ParseError) {
    if slot.as_ref().is_none_or(|&(first, _)| at < first) {
        *slot = Some((at, err));
    }
}

/// Whether `text` fails TOML's grammar: `toml`'s first pass (`toml_parser`'s
/// events, with the same whitespace and nesting checks), whose errors it
/// reports before any its tables' building finds.
fn grammar_fails(text: &str) -> bool {
    /// `toml`'s own nesting limit.
    const LIMIT: u32 = 80;
    let source = toml_parser::Source::new(text);
    let tokens = source.lex().into_vec();
    let mut events = ();
    let mut whitespace = toml_parser::parser::ValidateWhitespace::new(&mut events, source);
    let mut guard = toml_parser::parser::RecursionGuard::new(&mut whitespace, LIMIT);
    let mut error: Option<toml_parser::ParseError> = None;
    toml_parser::parser::parse_document(&tokens, &mut guard, &mut error);
    error.is_some()
}

/// [`Source::toml_error`] for an error in `doc`.
fn toml_error(src: &Source<'_>, doc: &Pieces<'_>, e: &toml::de::Error, code: ParseErrorCode) -> ParseError {
    let line = e.span().map(|s| src.line_at(doc.original(s.start)));
    src.error(code, line, format!("invalid TOML: {}", super::first_clause(e.message())))
}

/// Whether the root keys (before the first header) define `package`.
fn root_defines_package(text: &str, root_end: usize) -> bool {
    // A syntax error here is left for the rest's parse to report.
    toml::from_str::<toml::Table>(&text[..root_end]).is_ok_and(|t| t.contains_key("package"))
}

/// One `[[package]]` table: its header's segment, and segments of its
/// sub-tables that came after other tables (rare; contiguous ones are merged).
struct Chunk {
    first: Range<usize>,
    more: Vec<Range<usize>>,
}

impl Chunk {
    fn ranges(&self) -> Vec<Range<usize>> {
        std::iter::once(self.first.clone()).chain(self.more.iter().cloned()).collect()
    }

    fn push(&mut self, r: Range<usize>) {
        match self.more.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            None if self.first.end == r.start => self.first.end = r.end,
            _ => self.more.push(r),
        }
    }
}

/// The text cut at its top-level headers.
struct Split {
    /// Where the first header starts (the root keys are before it).
    root_end: usize,
    /// The root keys and every table that is not a package's, in order.
    rest: Vec<Range<usize>>,
    /// Every `[[package]]`, in order.
    packages: Vec<Chunk>,
    /// A table under `package` before the first `[[package]]`.
    package_before: bool,
}

/// What a header names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Header {
    /// `[[package]]`: a new package.
    PackageArray,
    /// `[package.x]`, `[[package.x]]`, `[package]`: within the last package.
    UnderPackage,
    /// Anything else.
    Other,
}

fn split(text: &str) -> Split {
    let headers: Vec<(usize, Header)> =
        header_lines(text).into_iter().filter_map(|at| classify_header(text, at).map(|h| (at, h))).collect();
    let root_end = headers.first().map_or(text.len(), |&(at, _)| at);
    let mut out = Split {
        root_end,
        rest: std::iter::once(0..root_end).collect(),
        packages: Vec::new(),
        package_before: false,
    };
    for (i, &(start, kind)) in headers.iter().enumerate() {
        let end = headers.get(i + 1).map_or(text.len(), |&(at, _)| at);
        match (kind, out.packages.last_mut()) {
            (Header::PackageArray, _) => out.packages.push(Chunk { first: start..end, more: Vec::new() }),
            (Header::UnderPackage, Some(last)) => last.push(start..end),
            (Header::UnderPackage, None) => {
                out.package_before = true;
                push_range(&mut out.rest, start..end);
            }
            (Header::Other, _) => push_range(&mut out.rest, start..end),
        }
    }
    out
}

fn push_range(ranges: &mut Vec<Range<usize>>, r: Range<usize>) {
    match ranges.last_mut() {
        Some(last) if last.end == r.start => last.end = r.end,
        _ => ranges.push(r),
    }
}

/// What the header on the line starting at `at` names; `None` when it is not
/// a header TOML reads (no split there: the piece it falls in reports it).
fn classify_header(text: &str, at: usize) -> Option<Header> {
    let line = text[at..].split('\n').next().unwrap_or("");
    let line = line.strip_suffix('\r').unwrap_or(line);
    let body = line.trim_start_matches([' ', '\t']);
    let array = body.starts_with("[[");
    let path =
        bare_path(body, array).map(|(first, n)| (first.to_owned(), n)).or_else(|| quoted_path(line))?;
    Some(match path {
        (first, 1) if first == "package" && array => Header::PackageArray,
        (first, _) if first == "package" => Header::UnderPackage,
        _ => Header::Other,
    })
}

/// A header of bare keys (`[[package]]`, `[package.source]`, `[metadata]`):
/// its first key and how many keys; `None` for anything else.
fn bare_path(body: &str, array: bool) -> Option<(&str, usize)> {
    let (open, close) = if array { ("[[", "]]") } else { ("[", "]") };
    let inner = body.strip_prefix(open)?;
    let end = inner.find(close)?;
    let after = inner[end + close.len()..].trim_start_matches([' ', '\t']);
    if !(after.is_empty() || after == "\r" || after.starts_with('#')) {
        return None;
    }
    let mut keys = inner[..end].split('.').map(|k| k.trim_matches([' ', '\t']));
    let first = keys.next()?;
    let bare =
        |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let mut n = 1;
    for k in keys {
        if !bare(k) {
            return None;
        }
        n += 1;
    }
    bare(first).then_some((first, n))
}

/// A header with quoted keys (`[["package"]]`, `['package'.source]`), read
/// by `toml` itself: its first key and how many keys.
fn quoted_path(line: &str) -> Option<(String, usize)> {
    let table = toml::from_str::<toml::Table>(line).ok()?;
    let mut keys = table.iter();
    let (first, mut value) = keys.next()?;
    let mut n = 1;
    loop {
        match value {
            toml::Value::Table(t) if t.len() == 1 => {
                n += 1;
                value = t.values().next()?;
            }
            toml::Value::Array(a) if a.len() == 1 => match a.first() {
                Some(toml::Value::Table(t)) if t.is_empty() => break,
                _ => return None,
            },
            toml::Value::Table(t) if t.is_empty() => break,
            _ => return None,
        }
    }
    // `[a.b]` is {a: {b: {}}}: the last table is the header's own.
    Some((first.clone(), n))
}

/// The offsets of the lines that hold a table header: a `[` first on its
/// line (after spaces or tabs), outside any multi-line string, array or
/// inline table. Comments and strings are skipped whole.
fn header_lines(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        if line_start {
            line_start = false;
            let start = i;
            while matches!(b.get(i), Some(b' ' | b'\t')) {
                i += 1;
            }
            if depth == 0 && b.get(i) == Some(&b'[') {
                out.push(start);
                i = header_end(b, i);
            }
            continue;
        }
        match b[i] {
            b'\n' => {
                line_start = true;
                i += 1;
            }
            b'#' => i = line_end(b, i),
            b'"' if b[i..].starts_with(b"\"\"\"") => i = multi_line_end(b, i + 3, b'"'),
            b'\'' if b[i..].starts_with(b"'''") => i = multi_line_end(b, i + 3, b'\''),
            b'"' | b'\'' => i = string_end(b, i + 1, b[i]),
            b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The end of a header's line (its `\n`), its quoted keys skipped whole.
fn header_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\n' => return i,
            b'#' => return line_end(b, i),
            b'"' | b'\'' => i = string_end(b, i + 1, b[i]),
            _ => i += 1,
        }
    }
    i
}

/// The offset of the `\n` ending the line at `i` (or the end).
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n)
}

/// Past a one-line string opened before `i` by `quote` (`\` escapes in `"`
/// strings). An unclosed one ends at its line's `\n`, left for the caller.
fn string_end(b: &[u8], mut i: usize, quote: u8) -> usize {
    while i < b.len() {
        match b[i] {
            b'\n' => return i,
            b'\\' if quote == b'"' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Past a multi-line string opened before `i` by three `quote`s: the first
/// three unescaped closing quotes, and up to two more that belong to the string.
fn multi_line_end(b: &[u8], mut i: usize, quote: u8) -> usize {
    while i < b.len() {
        if b[i] == b'\\' && quote == b'"' {
            i += 2;
        } else if b[i] == quote && b.get(i + 1) == Some(&quote) && b.get(i + 2) == Some(&quote) {
            i += 3;
            let mut extra = 0;
            while extra < 2 && b.get(i) == Some(&quote) {
                i += 1;
                extra += 1;
            }
            return i;
        } else {
            i += 1;
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{cargo, poetry};
    use super::*;

    #[test]
    fn headers_only_start_lines_outside_strings_and_arrays() {
        let text = "a = \"\"\"\n[[package]]\n\"\"\"\nb = [\n[1],\n]\nc = '''\n[x]'''\n# [[package]]\n  [[package]]\nd = \"[[package]]\"\n[ \"q\" . r ] # c\n";
        let at: Vec<&str> =
            header_lines(text).into_iter().map(|i| text[i..].lines().next().unwrap_or("")).collect();
        assert_eq!(at, ["  [[package]]", "[ \"q\" . r ] # c"]);
    }

    #[test]
    fn headers_are_classified_by_their_keys() {
        let kind = |line: &str| classify_header(line, 0);
        assert_eq!(kind("[[package]]"), Some(Header::PackageArray));
        assert_eq!(kind("[[ \"package\" ]] # x"), Some(Header::PackageArray));
        assert_eq!(kind("[['package']]"), Some(Header::PackageArray));
        assert_eq!(kind("[[\"pack\\u0061ge\"]]"), Some(Header::PackageArray));
        assert_eq!(kind("[package.source]"), Some(Header::UnderPackage));
        assert_eq!(kind("[ package . 'x.y' ]"), Some(Header::UnderPackage));
        assert_eq!(kind("[[package.files]]"), Some(Header::UnderPackage));
        assert_eq!(kind("[package]"), Some(Header::UnderPackage));
        assert_eq!(kind("[\"package.source\"]"), Some(Header::Other));
        assert_eq!(kind("[metadata.files]"), Some(Header::Other));
        assert_eq!(kind("[[package]] x"), None);
    }

    /// What a generated lockfile's parts may hold: each a line or lines of
    /// TOML, some meant to trip a splitter (headers inside strings, arrays
    /// and comments), some malformed.
    const FIELDS: [&str; 14] = [
        "",
        "checksum = \"abc\"\n",
        "description = \"\"\"\n[[package]]\nname = \"evil\"\n\"\"\"\n",
        "description = '''\n[[package]]\n[package.source]\n'''\n",
        "summary = \"[[package]] \\\" [x]\"\n",
        "dependencies = [\n \"a\",\n[\"b\"],\n \"[[package]]\",\n]\n",
        "# [[package]]\n",
        "notes = \"\"\"ends in quotes\"\"\"\"\"\n[[package]]\nname = \"after\"\nversion = \"1.0.0\"\n",
        "name = \"twice\"\n",
        "extra = \"unterminated\n",
        "extra = \n",
        "inline = { a = [1, 2], b = \"[[package]]\" }\n",
        "extra = \"\"\"never closed\n",
        "[package]\nx = 1\n",
    ];
    const NAMES: [&str; 4] = ["serde", "a-b_c", "a b", "Django"];
    const VERSIONS: [&str; 4] = ["\"1.0.0\"", "\"2.1.0rc1\"", "7", "\"x y\""];
    const CARGO_SOURCES: [&str; 6] = [
        "",
        "source = \"registry+https://github.com/rust-lang/crates.io-index\"\n",
        "source = \"registry+https://my.example/index\"\n",
        "source = \"git+https://example.com/r?rev=1#0123456789abcdef0123456789abcdef01234567\"\n",
        "source = \"path+file:///x\"\n",
        "source = \"weird+x\"\n",
    ];
    const POETRY_SOURCES: [&str; 5] = [
        "",
        "\n[package.source]\ntype = \"git\"\nurl = \"https://e.com/r\"\nresolved_reference = \"0123456789abcdef0123456789abcdef01234567\"\n",
        "\n[package.source]\ntype = \"directory\"\nurl = \"../x\"\n",
        "\n[package.source]\ntype = \"svn\"\n",
        "\n[[package.files]]\nfile = \"a.whl\"\nhash = \"sha256:0\"\n",
    ];
    const HEADERS: [&str; 4] =
        ["[[package]]\n", "  [[ \"package\" ]] # c\n", "[['package']]\n", "[[package]]\r\n"];
    const ROOTS: [&str; 7] = [
        "",
        "version = 3\n\n",
        "version = 4\n",
        "version = 9\n",
        "version = \"3\"\n",
        "# a comment\n\n",
        "package = []\n",
    ];
    const TAILS: [&str; 7] = [
        "",
        "\n[metadata]\nlock-version = \"2.1\"\ncontent-hash = \"x\"\n",
        "\n[metadata]\nlock-version = \"3.0\"\n",
        "\n[metadata]\n\"checksum a 1.0 (registry+x)\" = \"y\"\n\n[metadata.files]\na = [\n {file = \"[[package]]\", hash = \"h\"},\n]\n",
        "\n[[patch.unused]]\nname = \"p\"\nversion = \"1.0.0\"\n",
        "\n[metadata]\nlock-version = 2\n",
        "\n[metadata]\nx = 1\n[metadata]\ny = 2\n",
    ];

    type Choice = (usize, usize, usize, usize, usize);

    /// A lockfile from the choices: a root, packages, a tail, and maybe a
    /// table between the packages.
    fn lockfile(
        root: usize,
        packages: &[Choice],
        sources: &[&str],
        middle: Option<(usize, usize)>,
        tail: usize,
    ) -> String {
        let mut text = ROOTS[root].to_owned();
        for (i, &(header, name, version, source, field)) in packages.iter().enumerate() {
            if let Some((at, which)) = middle
                && at == i
            {
                text.push_str(TAILS[which]);
                text.push('\n');
            }
            text.push_str(HEADERS[header]);
            text.push_str(&format!("name = \"{}\"\nversion = {}\n", NAMES[name], VERSIONS[version]));
            text.push_str(FIELDS[field]);
            text.push_str(sources[source % sources.len()]);
            text.push('\n');
        }
        text.push_str(TAILS[tail]);
        text
    }

    fn package() -> impl Strategy<Value = Choice> {
        // Mostly well-formed: the malformed choices are the last ones.
        let field = prop_oneof![8 => 0..8usize, 1 => 0..FIELDS.len()];
        let name = prop_oneof![8 => 0..2usize, 1 => 0..NAMES.len()];
        let version = prop_oneof![8 => 0..2usize, 1 => 0..VERSIONS.len()];
        (0..HEADERS.len(), name, version, 0..6usize, field)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// One table at a time reads every generated Cargo.lock and
        /// poetry.lock as the whole document does: the same packages and
        /// warnings, or the same error at the same line.
        #[test]
        fn one_table_at_a_time_equals_the_whole_document(
            root in 0..ROOTS.len(),
            packages in proptest::collection::vec(package(), 0..6),
            middle in proptest::option::of((0..6usize, 0..TAILS.len())),
            tail in 0..TAILS.len(),
        ) {
            let text = lockfile(root, &packages, &CARGO_SOURCES, middle, tail);
            let src = Source { file: "Cargo.lock", text: &text };
            prop_assert_eq!(cargo::parse(&src), cargo::parse_whole(&src), "{}", text);
            let text = lockfile(root, &packages, &POETRY_SOURCES, middle, tail);
            let src = Source { file: "poetry.lock", text: &text };
            prop_assert_eq!(poetry::parse(&src), poetry::parse_whole(&src), "{}", text);
        }
    }

    /// The real lockfiles of the fixtures read the same both ways (and every
    /// one of their packages is found).
    #[test]
    fn the_fixtures_read_the_same_both_ways() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut seen = 0;
        for (dir, name) in [("cargo", "Cargo.lock"), ("poetry", "poetry.lock")] {
            for entry in std::fs::read_dir(root.join(dir)).expect("fixtures") {
                let path = entry.expect("entry").path().join(name);
                let Ok(text) = std::fs::read_to_string(&path) else { continue };
                let src = Source { file: name, text: &text };
                let (chunked, whole) = match dir {
                    "cargo" => (cargo::parse(&src), cargo::parse_whole(&src)),
                    _ => (poetry::parse(&src), poetry::parse_whole(&src)),
                };
                assert!(chunked.as_ref().is_ok_and(|p| !p.packages.is_empty()), "{}", path.display());
                assert_eq!(chunked, whole, "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 8, "{seen} fixtures");
    }

    #[test]
    fn pieces_map_back_to_the_text() {
        let text = "0123456789";
        let doc = Pieces::new(text, &[1..3, 6..9]);
        assert_eq!(&*doc.text, "12678");
        assert_eq!([0, 1, 2, 3, 4, 5].map(|i| doc.original(i)), [1, 2, 6, 7, 8, 9]);
    }
}
