//! `yarn.lock`: yarn classic (v1, its own indented format) and Berry (v2 and
//! later, YAML with a `__metadata` entry).
//!
//! yarn v1: every entry is a header naming the descriptors that resolved to
//! it (`"a@^1.0.0", a@^1.1.0:`), then indented fields (`version "1.1.2"`,
//! `resolved "<url>"`, `integrity ...`) and blocks (`dependencies:`). The
//! name comes from the descriptors; an alias descriptor
//! `string-width-cjs@npm:string-width@^4.2.0` names the real package
//! (`string-width`). Left out: `file:`/`link:` packages (local code). Git
//! dependencies (a `git+`/`ssh:` URL, a GitHub shorthand, or a tarball a
//! code host builds from a commit such as `codeload.github.com`) are
//! packages under the `version` yarn records for them (their
//! `package.json`'s, build metadata such as `2.1.6+git` kept) with the
//! commit from `resolved` or, when that names none, from a descriptor.
//! Every entry must have a `version`; one without is a `structure` error at
//! its header's line.
//!
//! Berry: the `resolution` locator gives the real name and the protocol.
//! `npm:` is a registry release; `workspace:`, `link:`, `portal:`, `file:`
//! and `exec:` are local and left out; `patch:` wraps another locator (the
//! package with a local patch applied): the package is the wrapped one, at
//! its npm version, counted once under its real name; git locators are
//! packages with the entry's `version` and the locator's commit; http(s)
//! tarballs are kept with the entry's `version`. A protocol this parser does
//! not know (a plugin's) is kept under the entry's `version`, with an
//! `unsupported_protocol` warning: the package is still checked.

use serde::Deserialize;

use super::npm::{
    OrderedMap, add_npm, is_git_source, is_local_spec, line_of, reported_version, short, split_name,
};
use super::pnpm::from_yaml;
use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::Ecosystem;

/// One v1 entry while it is being read.
struct Entry {
    line: usize,
    descriptors: Vec<String>,
    version: Option<String>,
    resolved: Option<String>,
}

pub(crate) fn parse_v1(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let mut out = Collector::default();
    let mut entry: Option<Entry> = None;
    // The deepest indentation the next line may have.
    let mut max_indent = 0;
    for (i, raw) in src.text.split('\n').enumerate() {
        let line_no = i + 1;
        let line = raw.trim_end_matches(['\r', ' ', '\t']);
        let trimmed = line.trim_start_matches(' ');
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let syntax = |msg: &str| src.error(ParseErrorCode::Syntax, Some(line_no), msg.to_owned());
        if trimmed.starts_with('\t') {
            return Err(syntax("tab in indentation"));
        }
        let indent = line.len() - trimmed.len();
        if indent % 2 != 0 || indent > max_indent {
            return Err(syntax("unexpected indentation"));
        }
        if indent == 0 {
            if let Some(done) = entry.take() {
                finish_v1(src, done, &mut out)?;
            }
            let Some(header) = trimmed.strip_suffix(':') else {
                return Err(syntax("expected an entry header ending in ':'"));
            };
            let descriptors = parse_descriptors(header).map_err(syntax)?;
            entry = Some(Entry { line: line_no, descriptors, version: None, resolved: None });
            max_indent = 2;
            continue;
        }
        let Some(current) = entry.as_mut() else {
            return Err(syntax("indented line outside an entry"));
        };
        let (key, value, opens_block) = parse_field(trimmed).map_err(syntax)?;
        if indent == 2 {
            match key.as_str() {
                "version" => current.version = value,
                "resolved" => current.resolved = value,
                _ => {}
            }
        }
        max_indent = if opens_block { indent + 2 } else { indent };
    }
    if let Some(done) = entry.take() {
        finish_v1(src, done, &mut out)?;
    }
    Ok(out.finish(Format::YarnV1))
}

/// Decides what a finished v1 entry is, and adds it when it is a registry package.
fn finish_v1(src: &Source<'_>, entry: Entry, out: &mut Collector) -> Result<(), ParseError> {
    let Some(version) = entry.version else {
        return Err(src.error(ParseErrorCode::Structure, Some(entry.line), "entry has no version"));
    };
    let mut names: Vec<&str> = Vec::new();
    let (mut local, mut git) = (false, false);
    for d in &entry.descriptors {
        let (name, range) = split_name(d).unwrap_or((d.as_str(), ""));
        let (name, range) = match range.strip_prefix("npm:") {
            // An alias names its target: `alias@npm:real@range`; `npm:range` keeps the name.
            Some(target) => split_name(target).unwrap_or((name, target)),
            None => (name, range),
        };
        local |= is_local_spec(range);
        // A GitHub shorthand `user/repo#ref`: ranges never hold a '/', URLs hold a ':'.
        git |= is_git_source(range) || (range.contains('/') && !range.contains(':'));
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let resolved = entry.resolved.as_deref();
    // `resolved`, when written, says where the package came from; without it the descriptors do.
    let (local, git) = match resolved {
        Some(r) if r.starts_with("file:") => (true, false),
        Some(r) if is_git_source(r) => (false, true),
        Some(_) => (false, false),
        None => (local, git),
    };
    if local {
        return Ok(());
    }
    // The commit: `resolved`'s, else a descriptor's (`a@https://host/a.git#<sha>`).
    let source = resolved
        .filter(|r| crate::package::commit_in(r).is_some())
        .or_else(|| {
            entry.descriptors.iter().map(String::as_str).find(|d| crate::package::commit_in(d).is_some())
        })
        .unwrap_or("");
    for name in names {
        add_npm(out, name, &version, git, source);
    }
    Ok(())
}

/// The comma-separated descriptors of a v1 header (without its trailing ':').
fn parse_descriptors(header: &str) -> Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches(' ');
        let (token, after) = if rest.starts_with('"') {
            take_quoted(rest)?
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            let token = rest.get(..end).unwrap_or("").trim_end_matches(' ');
            if token.contains('"') {
                return Err("stray quote in an entry header");
            }
            (token.to_owned(), rest.get(end..).unwrap_or(""))
        };
        if token.is_empty() {
            return Err("empty descriptor in an entry header");
        }
        out.push(token);
        rest = after.trim_start_matches(' ');
        match rest.strip_prefix(',') {
            Some(r) => rest = r,
            None if rest.is_empty() => return Ok(out),
            None => return Err("expected ',' between descriptors"),
        }
    }
}

/// A field line: `key value`, `key "value"`, or `key:` opening a block.
/// Returns the key, the value, and whether it opens a block.
fn parse_field(line: &str) -> Result<(String, Option<String>, bool), &'static str> {
    let (key, rest, colon) = if line.starts_with('"') {
        let (key, rest) = take_quoted(line)?;
        match rest.strip_prefix(':') {
            Some(r) => (key, r, true),
            None => (key, rest, false),
        }
    } else {
        let end = line.find(' ').unwrap_or(line.len());
        let key = line.get(..end).unwrap_or("");
        if key.contains('"') {
            return Err("stray quote in a field name");
        }
        let rest = line.get(end..).unwrap_or("");
        match key.strip_suffix(':') {
            Some(k) => (k.to_owned(), rest, true),
            None => (key.to_owned(), rest, false),
        }
    };
    let value = rest.trim_matches(' ');
    if value.is_empty() {
        return if colon { Ok((key, None, true)) } else { Err("field without a value") };
    }
    if !colon && !rest.starts_with(' ') {
        return Err("expected a space after a field name");
    }
    let value = if value.starts_with('"') {
        let (v, tail) = take_quoted(value)?;
        if !tail.trim().is_empty() {
            return Err("unexpected text after a quoted value");
        }
        v
    } else {
        if value.contains('"') {
            return Err("stray quote in a value");
        }
        value.to_owned()
    };
    Ok((key, Some(value), false))
}

/// A double-quoted string at the start of `s` (yarn writes them with
/// `JSON.stringify`), unescaped, and what follows it.
fn take_quoted(s: &str) -> Result<(String, &str), &'static str> {
    let bytes = s.as_bytes();
    let mut i = 1;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => {
                let quoted = s.get(..=i).ok_or("unterminated string")?;
                let value: String = serde_json::from_str(quoted).map_err(|_| "invalid escape in a string")?;
                return Ok((value, s.get(i + 1..).unwrap_or("")));
            }
            _ => i += 1,
        }
    }
    Err("unterminated string")
}

/// The supported Berry `__metadata.version`s: 1 to 10, the newest seen
/// (yarn 2 wrote 4, yarn 3 wrote 6, yarn 4 writes 8 and later). Every one of
/// them has the `resolution` locators read here. A later one is refused
/// (`unsupported_version`), not guessed at.
const BERRY_VERSIONS: std::ops::RangeInclusive<u64> = 1..=10;

#[derive(Deserialize)]
struct BerryHeader {
    #[serde(rename = "__metadata")]
    metadata: Option<BerryEntry>,
}

/// A Berry entry (and `__metadata`, which shares `version`).
#[derive(Deserialize)]
struct BerryEntry {
    version: Option<String>,
    resolution: Option<String>,
}

/// What a Berry locator turned out to be.
enum Locator<'a> {
    Package(&'a str, String),
    Local,
    /// The name and the commit the locator names.
    Git(&'a str, Option<String>),
    NoVersion(&'a str),
    Unsupported(&'a str),
}

pub(crate) fn parse_berry(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let header: BerryHeader = from_yaml(src)?;
    let meta_line = line_of(src.text, "__metadata:");
    let Some(meta) = header.metadata else {
        return Err(src.error(ParseErrorCode::Structure, meta_line, "__metadata is missing or empty"));
    };
    let Some(version) = meta.version else {
        return Err(src.error(ParseErrorCode::Structure, meta_line, "__metadata has no version"));
    };
    match version.trim().parse::<u64>() {
        Ok(v) if BERRY_VERSIONS.contains(&v) => {}
        Ok(_) => {
            return Err(src.error(
                ParseErrorCode::UnsupportedVersion,
                meta_line,
                format!("yarn lockfile __metadata.version is not in {BERRY_VERSIONS:?}"),
            ));
        }
        Err(_) => {
            return Err(src.error(
                ParseErrorCode::Structure,
                meta_line,
                "__metadata.version is not a number",
            ));
        }
    }
    let entries: OrderedMap<Option<BerryEntry>> = from_yaml(src)?;
    let mut out = Collector::default();
    for (key, entry) in &entries.0 {
        if key == "__metadata" {
            continue;
        }
        let line = || line_of(src.text, key);
        let Some(resolution) = entry.as_ref().and_then(|e| e.resolution.as_deref()) else {
            return Err(src.error(ParseErrorCode::Structure, line(), "entry has no resolution"));
        };
        let version = entry.as_ref().and_then(|e| e.version.as_deref());
        let recorded = reported_version(version.unwrap_or(""));
        match locator(resolution, version, 0) {
            Some(Locator::Package(name, v)) => out.add(Ecosystem::Npm, name, &v),
            Some(Locator::Local) => {}
            Some(Locator::Git(name, commit)) => {
                out.add_git(Ecosystem::Npm, name, recorded, commit.as_deref())
            }
            Some(Locator::NoVersion(name)) => out.add(Ecosystem::Npm, name, recorded),
            Some(Locator::Unsupported(name)) => {
                let msg = format!(
                    "{}: a resolution protocol gatehouse does not read; checked under its version",
                    short(name)
                );
                out.warn("unsupported_protocol", line(), msg);
                out.add(Ecosystem::Npm, name, recorded);
            }
            None => return Err(src.error(ParseErrorCode::Structure, line(), "malformed resolution")),
        }
    }
    Ok(out.finish(Format::YarnBerry))
}

/// Reads a Berry locator `name@protocol:reference`. `version` is the
/// entry's `version` field (used for tarballs, whose reference is a URL).
/// `None` when the locator is malformed.
fn locator<'a>(resolution: &'a str, version: Option<&str>, depth: u8) -> Option<Locator<'a>> {
    let (name, reference) = split_name(resolution)?;
    if let Some(v) = reference.strip_prefix("npm:") {
        // `npm:1.2.3`, possibly followed by `::key=value` bindings.
        let v = v.split("::").next().unwrap_or(v);
        let (name, v) = split_name(v).unwrap_or((name, v));
        // A registry version as written; the scan reports one it cannot read.
        return Some(if v.is_empty() || v.contains([':', '/']) {
            Locator::NoVersion(name)
        } else {
            Locator::Package(name, v.to_owned())
        });
    }
    if let Some(inner) = reference.strip_prefix("patch:") {
        // `patch:<url-encoded locator>#<patch file>::<bindings>`: the package is the wrapped locator.
        if depth >= 4 {
            return None;
        }
        let encoded = inner.split('#').next().unwrap_or(inner);
        let decoded = percent_decode(encoded)?;
        return match locator(&decoded, version, depth + 1)? {
            Locator::Package(n, v) if n == name => Some(Locator::Package(name, v)),
            Locator::Package(..) => None, // a patch of another package than the entry names
            Locator::Local => Some(Locator::Local),
            Locator::Git(_, commit) => Some(Locator::Git(name, commit)),
            Locator::NoVersion(_) => Some(Locator::NoVersion(name)),
            Locator::Unsupported(_) => Some(Locator::Unsupported(name)),
        };
    }
    if ["workspace:", "link:", "portal:", "file:", "exec:"].iter().any(|p| reference.starts_with(p)) {
        return Some(Locator::Local);
    }
    if is_git_source(reference) {
        return Some(Locator::Git(name, crate::package::commit_in(reference).map(str::to_owned)));
    }
    if reference.starts_with("https://") || reference.starts_with("http://") {
        return Some(match version.map(reported_version).filter(|v| !v.is_empty()) {
            Some(v) => Locator::Package(name, v.to_owned()),
            None => Locator::NoVersion(name),
        });
    }
    Some(Locator::Unsupported(name))
}

/// `%XX` decoding; `None` on a bad escape or non-UTF-8 result.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors() {
        assert_eq!(parse_descriptors("a@^1, a@^2").unwrap(), ["a@^1", "a@^2"]);
        assert_eq!(parse_descriptors(r#""@s/a@^1", "b@npm:c@^2""#).unwrap(), ["@s/a@^1", "b@npm:c@^2"]);
        assert_eq!(parse_descriptors(r#""a\"b@1""#).unwrap(), ["a\"b@1"]);
        for bad in ["", "a@1,", ",a@1", r#""a@1"#, r#""a@1" b"#, r#"a"b"#, "a@1,,b@2"] {
            assert!(parse_descriptors(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fields() {
        assert_eq!(
            parse_field(r#"version "1.0.0""#).unwrap(),
            ("version".into(), Some("1.0.0".into()), false)
        );
        assert_eq!(
            parse_field(r#""version" "1.0.0""#).unwrap(),
            ("version".into(), Some("1.0.0".into()), false)
        );
        assert_eq!(
            parse_field("integrity sha1-abc=").unwrap(),
            ("integrity".into(), Some("sha1-abc=".into()), false)
        );
        assert_eq!(parse_field("dependencies:").unwrap(), ("dependencies".into(), None, true));
        assert_eq!(parse_field(r#""dependencies":"#).unwrap(), ("dependencies".into(), None, true));
        assert_eq!(parse_field("a: b").unwrap(), ("a".into(), Some("b".into()), false));
        for bad in ["version", r#"version "1.0.0"#, r#"version "1" x"#, r#""a"b"#, r#"a"b c"#, r#"a "b"#] {
            assert!(parse_field(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn locators() {
        let pkg = |l: Option<Locator<'_>>| match l {
            Some(Locator::Package(n, v)) => Some((n.to_owned(), v)),
            _ => None,
        };
        assert_eq!(pkg(locator("@a/b@npm:1.2.3", None, 0)), Some(("@a/b".into(), "1.2.3".into())));
        assert_eq!(
            pkg(locator("a@npm:1.0.0::__archiveUrl=https%3A%2F%2Fx%2Fa-1.0.0.tgz", None, 0)),
            Some(("a".into(), "1.0.0".into()))
        );
        assert_eq!(
            pkg(locator(
                "resolve@patch:resolve@npm%3A2.0.0-next.4#~builtin<compat/resolve>::version=2.0.0-next.4",
                None,
                0
            )),
            Some(("resolve".into(), "2.0.0-next.4".into()))
        );
        assert!(matches!(locator("a@workspace:.", None, 0), Some(Locator::Local)));
        assert!(matches!(locator("a@patch:a@workspace%3A.#p.patch", None, 0), Some(Locator::Local)));
        assert!(matches!(
            locator("a@https://github.com/a/a.git#commit=abc", None, 0),
            Some(Locator::Git("a", _))
        ));
        assert!(matches!(locator("a@npm:latest", None, 0), Some(Locator::Package("a", _))));
        assert!(matches!(locator("a@npm:https://x/a.tgz", None, 0), Some(Locator::NoVersion("a"))));
        assert!(matches!(
            locator("a@https://x.test/a.tgz", Some("1.0.0"), 0),
            Some(Locator::Package("a", _))
        ));
        assert!(matches!(locator("a@weird:x", None, 0), Some(Locator::Unsupported("a"))));
        assert!(locator("nameless", None, 0).is_none());
        assert!(locator("a@patch:b@npm%3A1.0.0#p", None, 0).is_none());
        assert!(locator("a@patch:a@npm%3G1.0.0#p", None, 0).is_none());
    }
}
