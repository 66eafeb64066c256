//! Bundler `Gemfile.lock` (and `gems.locked`).
//!
//! Sections start at column 0. Source sections (`GEM`, `GIT`, `PATH`,
//! `PLUGIN SOURCE`) hold `  key: value` attributes and a `  specs:` list:
//! `    name (version)` at four spaces is a locked gem, and the lines at six
//! spaces under it are its dependencies (requirements, not packages).
//! `PLATFORMS`, `DEPENDENCIES`, `RUBY VERSION`, `BUNDLED WITH`, `CHECKSUMS`
//! and sections this parser does not know are skipped, as Bundler skips them.
//!
//! - `GEM`: gems from a gem server (rubygems.org or another): kept.
//! - `GIT`: gems built from a git checkout: kept with their version and the
//!   section's `revision:` commit, as git crates are (a checkout may differ
//!   from the release of that version, but leaving it out would hide it
//!   entirely).
//! - `PLUGIN SOURCE`: gems from a Bundler source plugin: kept, likewise.
//! - `PATH`: local gems (the project's own gemspec, vendored code): left out.
//!
//! A spec's version may carry a platform: `nokogiri (1.13.10-x86_64-linux)`.
//! RubyGems versions never contain `-` (`Gem::Version` turns `1.0.0-beta`
//! into `1.0.0.pre.beta`, so prereleases use dots), and Bundler's own lockfile
//! parser splits the version from the platform at the first `-`; so does
//! this one. The platform (`x86_64-linux`, `arm64-darwin`, `java`,
//! `x64-mingw32`, `x86_64-linux-musl`, ...) is not part of the version, and
//! the same gem locked for several platforms is one package.
//!
//! A spec line that is not `name (version)`, text before the first section
//! and git merge-conflict markers are `syntax` errors with the line.

use super::{Collector, Format, ParseError, ParseErrorCode, Parsed, Source};
use crate::package::Ecosystem;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    /// A source whose specs are packages (`GEM`, `GIT`, `PLUGIN SOURCE`).
    Remote,
    /// `PATH`: specs are local gems.
    Local,
    /// Any other section: skipped.
    Other,
}

pub(crate) fn parse(src: &Source<'_>) -> Result<Parsed, ParseError> {
    let mut out = Collector::default();
    let mut section: Option<Section> = None;
    let mut known_sections = 0usize;
    let mut in_specs = false;
    // The current GIT section's `revision:`, which Bundler writes before `specs:`.
    let mut revision: Option<&str> = None;
    for (i, line) in src.text.lines().enumerate() {
        let n = i + 1;
        let syntax = |message: &str| src.error(ParseErrorCode::Syntax, Some(n), message);
        if line.trim().is_empty() {
            continue;
        }
        if ["<<<<<<<", "=======", ">>>>>>>", "|||||||"].iter().any(|m| line.starts_with(m)) {
            return Err(syntax("a merge conflict marker"));
        }
        if !line.starts_with([' ', '\t']) {
            let (kind, known) = match line.trim_end() {
                "GEM" | "GIT" | "PLUGIN SOURCE" => (Section::Remote, true),
                "PATH" => (Section::Local, true),
                "PLATFORMS" | "DEPENDENCIES" | "RUBY VERSION" | "BUNDLED WITH" | "CHECKSUMS" => {
                    (Section::Other, true)
                }
                _ => (Section::Other, false),
            };
            known_sections += usize::from(known);
            section = Some(kind);
            in_specs = false;
            revision = None;
            continue;
        }
        let Some(section) = section else {
            return Err(syntax("indented text before the first section"));
        };
        if section == Section::Other {
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let body = &line[indent..];
        if body.starts_with('\t') {
            return Err(syntax("a tab in the indentation"));
        }
        match indent {
            2 => {
                in_specs = body.trim_end() == "specs:";
                if let Some(r) = body.trim_end().strip_prefix("revision: ") {
                    revision = Some(r).filter(|r| crate::package::is_commit(r));
                }
            }
            4 if in_specs => {
                let Some((name, version)) = spec(body.trim_end()) else {
                    return Err(syntax("a spec that is not `name (version)`"));
                };
                if section == Section::Remote {
                    out.add_git(Ecosystem::RubyGems, name, version, revision);
                }
            }
            6 if in_specs => {} // a dependency of the spec above
            _ if in_specs => return Err(syntax("unexpected indentation in a specs list")),
            _ => {} // continuation of a source attribute
        }
    }
    if known_sections == 0 && !src.text.trim().is_empty() {
        return Err(src.error(
            ParseErrorCode::Structure,
            None,
            "no Gemfile.lock sections (GEM, PLATFORMS, ...)",
        ));
    }
    Ok(out.finish(Format::GemfileLock))
}

/// `name (version)` or `name (version-platform)`: the name and the version.
fn spec(s: &str) -> Option<(&str, &str)> {
    let (name, rest) = s.split_once(" (")?;
    let inner = rest.strip_suffix(')')?;
    let (version, platform) = match inner.split_once('-') {
        Some((v, p)) => (v, Some(p)),
        None => (inner, None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 256
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    // Gem::Version without `-`: digits, then dot-separated alphanumeric parts.
    let version_ok = version.len() <= 256
        && version.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && !version.ends_with('.')
        && !version.contains("..")
        && version.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    let platform_ok = platform.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 128
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    });
    (name_ok && version_ok && platform_ok).then_some((name, version))
}

#[cfg(test)]
mod tests {
    use super::spec;

    #[test]
    fn specs() {
        assert_eq!(spec("rack (2.2.3)"), Some(("rack", "2.2.3")));
        assert_eq!(spec("nokogiri (1.13.10-x86_64-linux)"), Some(("nokogiri", "1.13.10")));
        assert_eq!(spec("ffi (1.17.4-x86_64-linux-musl)"), Some(("ffi", "1.17.4")));
        assert_eq!(spec("jruby-openssl (0.9.4-java)"), Some(("jruby-openssl", "0.9.4")));
        assert_eq!(spec("rails (7.1.0.beta1)"), Some(("rails", "7.1.0.beta1")));
        assert_eq!(spec("eco-source (1.1.0.rc.1)"), Some(("eco-source", "1.1.0.rc.1")));
        assert_eq!(spec("a (1.0-)"), None);
        assert_eq!(spec("a (v1.0)"), None);
        assert_eq!(spec("a (1.0"), None);
        assert_eq!(spec("a"), None);
        assert_eq!(spec("a b (1.0)"), None);
        assert_eq!(spec(" (1.0)"), None);
        assert_eq!(spec("a (1..0)"), None);
    }
}
