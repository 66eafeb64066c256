//! Go `go.mod`, read as osv-scanner reads it when no `go.sum` accompanies
//! the module (a go.sum, when there is one, is the better list: it names
//! what was downloaded, and the caller scans that instead).
//!
//! The grammar is golang.org/ref/mod#go-mod-file: one directive per line,
//! or a `verb (` block with one per line; `//` comments; module paths and
//! versions may be quoted (`"..."` or `` `...` ``).
//!
//! - `require path version`: a package, `// indirect` ones included (since
//!   Go 1.17 they are the rest of the build list).
//! - `replace path [version] => path [version]`: what is built instead. A
//!   replacement with a version is a package under its own path and
//!   version, in place of the required one (of that version only, when the
//!   left side names one); a replacement by a directory (`./x`, `../x`,
//!   `/x`) is local code and leaves the required module out. A replace of a
//!   module not required changes nothing.
//! - `exclude path version`: kept, and noted (`excluded_version`) when a
//!   required version is excluded: the go command would then pick a later
//!   version, which cannot be known from go.mod alone, so the required one
//!   is checked (the lower, so the safer, reading).
//! - `retract`: this module's own versions, not dependencies; noted
//!   (`retracted_versions`), nothing more.
//! - `module`, `go`, `toolchain`, `godebug`, `tool`, `ignore`: no packages.
//!   The Go standard library is not reported: the `go` line is a language
//!   version, not the toolchain that builds the binary.
//!
//! Any other directive, a malformed line or an unclosed block is a `syntax`
//! error with its line: a line this parser cannot read may hide a dependency.

use std::collections::BTreeMap;

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::Ecosystem;

const KNOWN: [&str; 10] =
    ["module", "go", "toolchain", "godebug", "require", "exclude", "replace", "retract", "tool", "ignore"];

/// (path, version or `None` for every version) → the replacement's
/// (path, version), `None` when it is a directory.
type Replacements = BTreeMap<(String, Option<String>), Option<(String, String)>>;

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let mut out = Collector::default();
    let mut required: Vec<(String, String, usize)> = Vec::new();
    let mut excluded: Vec<(String, String)> = Vec::new();
    let mut replaced = Replacements::new();
    let mut block: Option<(String, usize)> = None;
    for (i, raw) in src.text.lines().enumerate() {
        let n = i + 1;
        let syntax = |message: &str| src.error(ParseErrorCode::Syntax, Some(n), message);
        let words = tokens(raw).map_err(syntax)?;
        let Some(first) = words.first() else { continue };
        let (verb, args): (String, &[String]) = match &block {
            Some(_) if first == ")" && words.len() == 1 => {
                block = None;
                continue;
            }
            Some((verb, _)) => (verb.clone(), &words[..]),
            None => {
                if !KNOWN.contains(&first.as_str()) {
                    return Err(syntax("not a go.mod directive"));
                }
                if words.len() == 2 && words[1] == "(" {
                    block = Some((first.clone(), n));
                    continue;
                }
                (first.clone(), &words[1..])
            }
        };
        // A module path or version is never empty (the go command calls
        // one "malformed"): an empty quoted string is refused, not read as
        // a package without a name.
        if matches!(verb.as_str(), "require" | "exclude" | "replace") && args.iter().any(String::is_empty) {
            return Err(syntax("an empty module path or version"));
        }
        match (verb.as_str(), args) {
            ("require", [path, version]) => required.push((path.clone(), version.clone(), n)),
            ("exclude", [path, version]) => excluded.push((path.clone(), version.clone())),
            ("replace", [old, rest @ ..]) => {
                let (old_version, rest) = match rest {
                    [arrow, rest @ ..] if arrow == "=>" => (None, rest),
                    [v, arrow, rest @ ..] if arrow == "=>" => (Some(v.clone()), rest),
                    _ => return Err(syntax("a replace without `=>`")),
                };
                let target = match rest {
                    [dir] if is_local(dir) => None,
                    [path, version] => Some((path.clone(), version.clone())),
                    _ => return Err(syntax("a replacement that is neither a directory nor `path version`")),
                };
                replaced.insert((old.clone(), old_version), target);
            }
            ("retract", [_, ..]) => {
                out.warn("retracted_versions", Some(n), "this module retracts some of its own versions");
            }
            ("module" | "go" | "toolchain" | "godebug" | "tool" | "ignore", [_, ..]) => {}
            _ => return Err(syntax("a directive with the wrong number of arguments")),
        }
    }
    if let Some((_, line)) = block {
        return Err(src.error(ParseErrorCode::Syntax, Some(line), "a block without its closing `)`"));
    }
    for (path, version, line) in required {
        if excluded.iter().any(|(p, v)| *p == path && *v == version) {
            out.warn(
                "excluded_version",
                Some(line),
                "a required version is excluded; the go command would pick a later one, the required one is checked",
            );
        }
        let replacement = replaced
            .get(&(path.clone(), Some(version.clone())))
            .or_else(|| replaced.get(&(path.clone(), None)));
        match replacement {
            Some(None) => {} // replaced by a directory: local code
            Some(Some((to, v))) => out.add(Ecosystem::Go, to, v),
            None => out.add(Ecosystem::Go, &path, &version),
        }
    }
    Ok(out.finish(Format::GoMod))
}

/// A replacement by a directory, as the go command tells one from a module path.
fn is_local(path: &str) -> bool {
    path.starts_with("./") || path.starts_with("../") || path.starts_with('/') || path == "." || path == ".."
}

/// A line's tokens without its comment: words, `(`, `)`, `=>`, and quoted
/// strings unquoted.
fn tokens(line: &str) -> Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if rest.starts_with("//") {
            break;
        }
        let (token, after) = match rest.as_bytes()[0] {
            b'"' => {
                let end = quoted_end(rest).ok_or("an unterminated string")?;
                let text: String = serde_json::from_str(&rest[..end]).map_err(|_| "an invalid string")?;
                (text, &rest[end..])
            }
            b'`' => {
                let end = rest[1..].find('`').ok_or("an unterminated string")? + 2;
                (rest[1..end - 1].to_owned(), &rest[end..])
            }
            _ => {
                let end =
                    rest.find(|c: char| c.is_whitespace() || c == '"' || c == '`').unwrap_or(rest.len());
                let word = &rest[..end];
                // `//` starts a comment even right after a word.
                let word = word.split("//").next().unwrap_or(word);
                (word.to_owned(), &rest[word.len()..])
            }
        };
        if token.contains(['\0', '\n']) {
            return Err("a control character in a token");
        }
        out.push(token);
        rest = after.trim_start();
    }
    Ok(out)
}

/// The byte just past a double-quoted string at the start of `s`.
fn quoted_end(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 1;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_the_grammar() {
        assert_eq!(tokens("require a v1.0.0 // indirect").unwrap(), ["require", "a", "v1.0.0"]);
        assert_eq!(tokens("\t\"a b\" `v1`").unwrap(), ["a b", "v1"]);
        assert_eq!(tokens("replace a => ./x//c").unwrap(), ["replace", "a", "=>", "./x"]);
        assert!(tokens("require \"a").is_err());
        assert!(tokens("require `a").is_err());
        assert_eq!(tokens("  // only a comment").unwrap(), Vec::<String>::new());
    }

    /// Found by the `lockfile_parse` fuzz target: `require""""` read as a
    /// package with an empty name and version.
    #[test]
    fn an_empty_module_path_or_version_is_refused() {
        for text in [
            "require\"\"\"\"",
            "require \"\" v1.0.0",
            "require (\n\ta \"\"\n)",
            "replace a => \"\" v1",
            "exclude `` v1",
        ] {
            let e = crate::lockfile::parse("go.mod", text.as_bytes()).unwrap_err();
            assert_eq!(e.code, ParseErrorCode::Syntax, "{text:?}");
        }
    }
}
