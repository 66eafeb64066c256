//! Version ordering, one scheme per ecosystem, as OSV ranges need it.
//!
//! | ecosystem | scheme | notes |
//! |---|---|---|
//! | crates.io | [`Scheme::SemVer`] | SemVer 2.0 with osv.dev's leniency: one leading `v` dropped, a missing minor or patch read as 0 |
//! | npm | [`Scheme::Npm`] | SemVer 2.0; surrounding whitespace and a leading run of `=`/`v` are dropped first, as node-semver's `clean()` (used by npm when it normalizes a package's version) does; a missing minor or patch is 0, as osv.dev reads it |
//! | Go | [`Scheme::Go`] | golang.org/x/mod/semver: an optional leading `v` (go.sum writes it, OSV does not), the shorthands `v1` and `v1.2` (no suffix) for `v1.0.0` and `v1.2.0` |
//! | PyPI | [`Scheme::Pep440`] | PEP 440 ([`Pep440`]), local labels included, numbers of any length; surrounding Unicode white space dropped, as `packaging` does |
//! | RubyGems | [`Scheme::RubyGems`] | `Gem::Version` |
//!
//! Every SemVer scheme orders by SemVer precedence (section 11): build
//! metadata is ignored, so Go's `+incompatible` and npm's `2.1.6+git` do not
//! affect the order, and `1.0.0+a` equals `1.0.0+b`. Numeric parts
//! (major, minor, patch and numeric prerelease identifiers) are compared as
//! numbers of any length, as golang.org/x/mod/semver compares them: a Go
//! version such as `v0.0.0-20200101000000-abcdef123456` or a module with a
//! major version past 64 bits is ordered, not refused. Go pseudo-versions
//! (`v0.0.0-20200101000000-abcdef123456`, `vX.Y.Z-pre.0.<time>-<hash>`,
//! `vX.Y.(Z+1)-0.<time>-<hash>`) are ordinary SemVer prereleases; their
//! fixed-width timestamp makes precedence order them by time, and each sorts
//! above its base version and below the next release, which is what
//! golang.org/ref/mod#pseudo-versions specifies. No special code is needed,
//! and none is written.
//!
//! PEP 440 versions order exactly as PEP 440 and `packaging.version.Version`
//! order them: epoch, release (trailing zeros ignored), then dev releases
//! below pre-releases below the release below post-releases (a pre-release's
//! own dev and post releases nested the same way: `1.0a1.dev1 < 1.0a1 <
//! 1.0a1.post1.dev1 < 1.0a1.post1 < 1.0b1`), and a local version above its
//! public version (`1.0 < 1.0+a < 1.0+1 < 1.0+1.0 < 1.0.post1`: label
//! segments compare as numbers when both are numeric, a number above
//! letters, a longer label above its prefix). This is checked against
//! `packaging`'s own suite and 4,000 versions sorted by it
//! (`tests/fixtures/pep440/`). The matcher, not this order, applies PEP
//! 440's rule that a bound without a local label ignores the candidate's
//! (see [`Version::public`]). Its numbers (epoch, release, pre, post, dev
//! and numeric local segments) are of any length, as PEP 440 puts no bound
//! on them and `packaging` reads them: `1.99999999999999999999999` is
//! ordered above `1.18446744073709551615` and below `2`, never refused, and
//! leading zeros are dropped (`1.01 == 1.1`).
//!
//! A string that is not a version in its scheme is a [`VersionError`], never
//! a guess: the caller decides what an unreadable version means (the matcher
//! reports it; it is never "not affected").

use std::cmp::Ordering;
use std::fmt;

use crate::package::Ecosystem;

/// A version syntax and its ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// SemVer 2.0, strict (crates.io; OSV `SEMVER` ranges outside npm and Go).
    SemVer,
    /// SemVer 2.0 after npm's `clean()`: trimmed, leading `=`/`v` run dropped.
    Npm,
    /// SemVer 2.0 with an optional leading `v` (Go modules).
    Go,
    /// PEP 440 (PyPI).
    Pep440,
    /// RubyGems' `Gem::Version`.
    RubyGems,
}

impl Scheme {
    /// The number of schemes (for per-scheme caches).
    pub const COUNT: usize = 5;

    /// The scheme of an ecosystem's own versions (OSV `ECOSYSTEM` ranges and
    /// `versions` lists).
    pub const fn of(ecosystem: Ecosystem) -> Self {
        match ecosystem {
            Ecosystem::Npm => Self::Npm,
            Ecosystem::PyPI => Self::Pep440,
            Ecosystem::Go => Self::Go,
            Ecosystem::CratesIo => Self::SemVer,
            Ecosystem::RubyGems => Self::RubyGems,
        }
    }

    /// The scheme of an OSV `SEMVER` range for a package of this ecosystem:
    /// SemVer 2.0 precedence, read with the ecosystem's own spelling where it
    /// has one (npm's `clean()`, Go's `v`), strict otherwise. A PyPI or
    /// RubyGems version that is not SemVer cannot be placed in such a range.
    pub const fn semver_range(ecosystem: Ecosystem) -> Self {
        match ecosystem {
            Ecosystem::Npm => Self::Npm,
            Ecosystem::Go => Self::Go,
            Ecosystem::PyPI | Ecosystem::CratesIo | Ecosystem::RubyGems => Self::SemVer,
        }
    }

    /// A dense index in `0..COUNT`.
    pub const fn index(self) -> usize {
        match self {
            Self::SemVer => 0,
            Self::Npm => 1,
            Self::Go => 2,
            Self::Pep440 => 3,
            Self::RubyGems => 4,
        }
    }

    /// A stable name, for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SemVer => "semver",
            Self::Npm => "npm-semver",
            Self::Go => "go-semver",
            Self::Pep440 => "pep440",
            Self::RubyGems => "rubygems",
        }
    }

    /// Parses `input` as a version of this scheme.
    pub fn parse(self, input: &str) -> Result<Version, VersionError> {
        let err = |reason: String| VersionError::new(self, input, reason);
        match self {
            Self::SemVer => {
                let bare = input.strip_prefix('v').unwrap_or(input);
                parse_semver(bare, Shorthand::WithSuffix).map(Version::SemVer).map_err(err)
            }
            Self::Npm => {
                let cleaned = input.trim().trim_start_matches(['=', 'v']);
                parse_semver(cleaned, Shorthand::WithSuffix).map(Version::SemVer).map_err(err)
            }
            Self::Go => {
                let bare = input.strip_prefix('v').unwrap_or(input);
                parse_semver(bare, Shorthand::Bare).map(Version::SemVer).map_err(err)
            }
            // packaging matches `\s*VERSION\s*`: Python's `\s`, which is
            // Unicode White_Space and the four ASCII separators 0x1C-0x1F.
            Self::Pep440 => {
                Pep440::parse(input.trim_matches(is_python_space)).map(Version::Pep440).map_err(err)
            }
            Self::RubyGems => GemVersion::parse(input).map(Version::Gem).map_err(err),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Python's `str.isspace()`, which `\s` in a `str` pattern matches.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Compares two versions of one ecosystem.
pub fn compare(ecosystem: Ecosystem, a: &str, b: &str) -> Result<Ordering, VersionError> {
    let scheme = Scheme::of(ecosystem);
    Ok(scheme.parse(a)?.cmp(&scheme.parse(b)?))
}

/// A string that is not a version in the scheme it was read with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a {scheme} version: {input:?}: {reason}")]
pub struct VersionError {
    /// The scheme it was read with.
    pub scheme: Scheme,
    /// The input, cut to 64 characters.
    pub input: String,
    /// Why.
    pub reason: String,
}

impl VersionError {
    fn new(scheme: Scheme, input: &str, reason: String) -> Self {
        Self { scheme, input: input.chars().take(64).collect(), reason }
    }
}

/// A parsed version.
///
/// Versions of the three SemVer schemes share one representation and compare
/// with each other; comparing across representations (a SemVer version with
/// a PEP 440 one) is well defined (the variant decides) but meaningless, and
/// the matcher never does it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// SemVer precedence: build metadata dropped.
    SemVer(SemVer),
    /// PEP 440.
    Pep440(Pep440),
    /// `Gem::Version`.
    Gem(GemVersion),
}

impl Version {
    /// The version a bound without a PEP 440 local label is compared with:
    /// PEP 440 ignores a candidate's local label when the specifier has none
    /// (`1.0+ubuntu1` matches `<= 1.0` and `== 1.0`), so the matcher compares
    /// such bounds with this. The version itself for every other scheme, and
    /// for a PEP 440 version without a label.
    pub fn public(&self) -> std::borrow::Cow<'_, Self> {
        match self {
            Self::Pep440(v) if v.has_local() => std::borrow::Cow::Owned(Self::Pep440(v.without_local())),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// True for a PEP 440 version with a local label (`1.0+ubuntu1`).
    pub fn has_local(&self) -> bool {
        matches!(self, Self::Pep440(v) if v.has_local())
    }
}

/// A SemVer 2.0 version without its build metadata: equality and order are
/// SemVer precedence.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SemVer {
    /// Major.
    pub major: Number,
    /// Minor.
    pub minor: Number,
    /// Patch.
    pub patch: Number,
    /// Prerelease identifiers (empty for a release, which sorts above them).
    /// `semver::Prerelease` already compares numeric identifiers of any
    /// length as numbers.
    pub pre: semver::Prerelease,
}

/// A non-negative integer of any length, as SemVer's numeric parts are.
///
/// The derived order is numeric: `Big` holds only values above `u64::MAX`,
/// written without leading zeros, so it sorts above every `Small`, and two
/// `Big`s compare by length, then digit by digit (see [`Digits`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Number {
    /// Up to `u64::MAX`: the common case, no allocation.
    Small(u64),
    /// Above `u64::MAX`.
    Big(Digits),
}

/// Decimal digits without leading zeros, ordered by length first: numeric order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digits(Box<str>);

impl Ord for Digits {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Digits {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Number {
    /// Digits with no leading zero (but `0` itself).
    fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{:?} is not a number", cut(s)));
        }
        if s.len() > 1 && s.starts_with('0') {
            return Err(format!("{:?} has a leading zero", cut(s)));
        }
        Ok(s.parse::<u64>().map_or_else(|_| Self::Big(Digits(s.into())), Self::Small))
    }

    /// ASCII digits, leading zeros dropped (PEP 440 reads `01` as 1).
    fn of_digits(s: &str) -> Self {
        let s = s.trim_start_matches('0');
        match s {
            "" => Self::Small(0),
            s => s.parse::<u64>().map_or_else(|_| Self::Big(Digits(s.into())), Self::Small),
        }
    }

    fn is_zero(&self) -> bool {
        matches!(self, Self::Small(0))
    }
}

/// A PEP 440 version, held as the order compares it: the fields are
/// `packaging`'s comparison key, so the derived equality, hash and order are
/// PEP 440's (`1.0 == 1.0.0`, `1.01 == 1.1`, `1.0.dev0 < 1.0a0`).
///
/// Numbers are [`Number`]s, of any length: PEP 440 bounds none, and
/// `packaging` reads `1.99999999999999999999999` as the version it is, so a
/// number past 64 bits is ordered, never refused or wrapped.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pep440 {
    epoch: Number,
    /// The release segment without its trailing zeros.
    release: Vec<Number>,
    pre: PreKey,
    /// `None` (no post-release) sorts below every post-release.
    post: Option<Number>,
    dev: DevKey,
    /// The local label's segments; empty (no label) sorts below every label.
    local: Vec<LocalSegment>,
}

/// A pre-release, in `packaging`'s order: a dev release of the release itself
/// (`1.0.dev0`, no pre or post) below every pre-release, the release above them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum PreKey {
    DevOfRelease,
    Pre(PreKind, Number),
    Release,
}

/// `a` (`alpha`), `b` (`beta`), `rc` (`c`, `pre`, `preview`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum PreKind {
    Alpha,
    Beta,
    Rc,
}

/// A dev release below its version without one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum DevKey {
    Dev(Number),
    None,
}

/// A local label's segment: letters (lowercased) below any number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum LocalSegment {
    Letters(Box<str>),
    Number(Number),
}

impl Pep440 {
    /// Parses `packaging`'s `VERSION_PATTERN` (ASCII letters in any case;
    /// the caller trims the white space around it):
    ///
    /// ```text
    /// v? (N!)? N(.N)* ([-_.]? (alpha|a|beta|b|preview|pre|c|rc) [-_.]? N?)?
    ///    (-N | [-_.]? (post|rev|r) [-_.]? N?)? ([-_.]? dev [-_.]? N?)?
    ///    (+ [a-z0-9]+ ([-_.] [a-z0-9]+)*)?
    /// ```
    ///
    /// Read left to right without backtracking: where the pattern offers a
    /// choice (a separator before a number, a longer or shorter label), only
    /// one of them can lead to a match.
    pub fn parse(input: &str) -> Result<Self, String> {
        let lower = input.to_ascii_lowercase();
        let (public, local) = match lower.split_once('+') {
            Some((public, local)) => (public, Some(local)),
            None => (lower.as_str(), None),
        };
        let mut s = Cursor(public.strip_prefix('v').unwrap_or(public).as_bytes());
        let invalid = || format!("{:?} is not a PEP 440 version", cut(input));
        let first = s.number().ok_or_else(invalid)?;
        let (epoch, first) =
            if s.eat(b"!") { (first, s.number().ok_or_else(invalid)?) } else { (Number::Small(0), first) };
        let mut release = vec![first];
        while s.0.first() == Some(&b'.') && s.0.get(1).is_some_and(u8::is_ascii_digit) {
            s.eat(b".");
            release.push(s.number().ok_or_else(invalid)?);
        }
        // `packaging` drops trailing zeros before comparing (`1.0 == 1`, `0.0 == 0`).
        while release.last().is_some_and(Number::is_zero) {
            release.pop();
        }
        let pre = s.labelled(&[
            ("alpha", PreKind::Alpha),
            ("a", PreKind::Alpha),
            ("beta", PreKind::Beta),
            ("b", PreKind::Beta),
            ("preview", PreKind::Rc),
            ("pre", PreKind::Rc),
            ("c", PreKind::Rc),
            ("rc", PreKind::Rc),
        ]);
        let post = if s.0.first() == Some(&b'-') && s.0.get(1).is_some_and(u8::is_ascii_digit) {
            s.eat(b"-");
            s.number()
        } else {
            s.labelled(&[("post", ()), ("rev", ()), ("r", ())]).map(|((), n)| n)
        };
        let dev = s.labelled(&[("dev", ())]).map(|((), n)| n);
        if !s.0.is_empty() {
            return Err(invalid());
        }
        let local = match local {
            None => Vec::new(),
            Some(label) => {
                let mut segments = Vec::new();
                for part in label.split(['-', '_', '.']) {
                    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    {
                        return Err(invalid());
                    }
                    segments.push(match part.bytes().all(|b| b.is_ascii_digit()) {
                        true => LocalSegment::Number(Number::of_digits(part)),
                        false => LocalSegment::Letters(part.into()),
                    });
                }
                segments
            }
        };
        let pre = match (pre, &post, &dev) {
            (Some((kind, n)), _, _) => PreKey::Pre(kind, n),
            (None, None, Some(_)) => PreKey::DevOfRelease,
            (None, _, _) => PreKey::Release,
        };
        Ok(Self { epoch, release, pre, post, dev: dev.map_or(DevKey::None, DevKey::Dev), local })
    }

    /// Whether it has a local label (`1.0+ubuntu1`).
    pub fn has_local(&self) -> bool {
        !self.local.is_empty()
    }

    /// The version without its local label.
    pub fn without_local(&self) -> Self {
        Self { local: Vec::new(), ..self.clone() }
    }
}

/// What is left of a PEP 440 version's text (lowercased), read from the front.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn eat(&mut self, prefix: &[u8]) -> bool {
        match self.0.strip_prefix(prefix) {
            Some(rest) => {
                self.0 = rest;
                true
            }
            None => false,
        }
    }

    /// A run of digits, as a number (leading zeros dropped).
    fn number(&mut self) -> Option<Number> {
        let n = self.0.iter().take_while(|b| b.is_ascii_digit()).count();
        let (digits, rest) = self.0.split_at(n);
        self.0 = rest;
        // ASCII digits: always UTF-8.
        (n > 0).then(|| Number::of_digits(std::str::from_utf8(digits).unwrap_or("0")))
    }

    /// `[-_.]? LABEL [-_.]? N?`, the first of `labels` that is there (each
    /// longer label before its own prefix); the number is 0 when absent.
    fn labelled<T: Copy>(&mut self, labels: &[(&str, T)]) -> Option<(T, Number)> {
        let after_separator = match self.0.first() {
            Some(b'-' | b'_' | b'.') => &self.0[1..],
            _ => self.0,
        };
        let (rest, value) = labels
            .iter()
            .find_map(|&(label, value)| after_separator.strip_prefix(label.as_bytes()).map(|r| (r, value)))?;
        self.0 = rest;
        if matches!(self.0.first(), Some(b'-' | b'_' | b'.')) {
            self.0 = &self.0[1..];
        }
        // `1.0a-`: the pattern takes the separator even with no number after it.
        Some((value, self.number().unwrap_or(Number::Small(0))))
    }
}

fn cut(s: &str) -> String {
    s.chars().take(32).collect()
}

/// Which shorthands (`1`, `1.2`) read as `1.0.0`, `1.2.0`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shorthand {
    /// Also before a prerelease or build (`1.2-beta`): osv.dev's reading of
    /// npm and crates.io versions.
    WithSuffix,
    /// Only with nothing after them: golang.org/x/mod/semver's rule.
    Bare,
}

/// `MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]`, numbers of any length; build
/// metadata is checked and dropped.
fn parse_semver(input: &str, shorthand: Shorthand) -> Result<SemVer, String> {
    let (rest, build) = match input.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (input, None),
    };
    if let Some(build) = build {
        if build.is_empty() {
            return Err("empty build metadata".to_owned());
        }
        semver::BuildMetadata::new(build).map_err(|e| e.to_string())?;
    }
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let pre = match pre {
        Some("") => return Err("empty prerelease".to_owned()),
        Some(pre) => semver::Prerelease::new(pre).map_err(|e| e.to_string())?,
        None => semver::Prerelease::EMPTY,
    };
    let parts: Vec<&str> = core.split('.').collect();
    let suffixed = build.is_some() || !pre.is_empty();
    let allowed = match shorthand {
        Shorthand::WithSuffix => 1..=3,
        Shorthand::Bare if suffixed => 3..=3,
        Shorthand::Bare => 1..=3,
    };
    if !allowed.contains(&parts.len()) {
        return Err("not MAJOR.MINOR.PATCH".to_owned());
    }
    let number = |i: usize| parts.get(i).map_or(Ok(Number::Small(0)), |p| Number::parse(p));
    Ok(SemVer { major: number(0)?, minor: number(1)?, patch: number(2)?, pre })
}

/// A RubyGems version, compared as `Gem::Version#<=>` does.
///
/// Follows `lib/rubygems/version.rb` as RubyGems ships it today (3.4 and
/// later): the string must match `VERSION_PATTERN` (surrounding whitespace
/// allowed); every `-` becomes `.pre.`; a version with a letter is a
/// prerelease. Comparison uses the *canonical* segments: the version string
/// minus its trailing run of `.` and `0` after a letter or dot
/// (`1.0.0` → `1.`), minus, in a prerelease, the first run of zero segments
/// that starts the string or follows a dot and is followed by a letter
/// (`1.0.0.a` → `1.a`), then split into runs of digits and runs of ASCII
/// letters. Segments are compared pairwise, the shorter list padded with 0;
/// letters sort below any number (so `1.0.a` < `1.0`) and compare bytewise,
/// numbers by value (of any size).
///
/// RubyGems 3.3 and earlier canonicalized by dropping the trailing zeros of
/// the numeric part and of the rest separately; the two differ only where a
/// zero segment sits between letter segments (`1.a.0.b`). The port was
/// checked pair by pair against Ruby running that code.
///
/// One deliberate difference: an empty or all-whitespace string, which
/// RubyGems reads as `0`, is an error here: no lockfile or advisory means it.
#[derive(Debug, Clone)]
pub struct GemVersion {
    canonical: Vec<GemSegment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum GemSegment {
    /// Digits without leading zeros ("0" for zero).
    Number(Box<str>),
    /// ASCII letters, case kept.
    Letters(Box<str>),
}

impl GemSegment {
    fn cmp_to_zero(&self) -> Ordering {
        match self {
            Self::Number(n) if &**n == "0" => Ordering::Equal,
            Self::Number(_) => Ordering::Greater,
            Self::Letters(_) => Ordering::Less,
        }
    }

    fn cmp_to(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Number(a), Self::Number(b)) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
            (Self::Letters(a), Self::Letters(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Self::Letters(_), Self::Number(_)) => Ordering::Less,
            (Self::Number(_), Self::Letters(_)) => Ordering::Greater,
        }
    }
}

impl GemVersion {
    /// Parses a gem version string.
    pub fn parse(input: &str) -> Result<Self, String> {
        let trimmed = input.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'));
        if trimmed.is_empty() {
            return Err("empty version".to_owned());
        }
        if !gem_pattern_matches(trimmed) {
            return Err("does not match Gem::Version's pattern".to_owned());
        }
        let normalized = trimmed.replace('-', ".pre.");
        let canonical = canonical_string(&normalized);
        Ok(Self { canonical: partition(&canonical) })
    }
}

/// `[0-9]+(\.[0-9a-zA-Z]+)*(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?`, whole string.
fn gem_pattern_matches(s: &str) -> bool {
    let (main, pre) = match s.split_once('-') {
        Some((main, pre)) => (main, Some(pre)),
        None => (s, None),
    };
    let mut parts = main.split('.');
    let first_ok = parts.next().is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !first_ok || !parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric())) {
        return false;
    }
    match pre {
        None => true,
        Some(pre) => {
            pre.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        }
    }
}

/// The two substitutions of `Gem::Version#canonical_segments`, on the string:
/// `sub(/(?<=[a-zA-Z.])[.0]+\z/, "")`, then, for a prerelease,
/// `sub!(/(?<=\.|\A)[0.]+(?=[a-zA-Z])/, "")` (first match only).
fn canonical_string(v: &str) -> String {
    let b = v.as_bytes();
    // 1. The leftmost position i, after a letter or a dot, from which the
    //    rest is all dots and zeros, non-empty.
    let mut tail_start = b.len();
    while tail_start > 0 && matches!(b[tail_start - 1], b'.' | b'0') {
        tail_start -= 1;
    }
    let mut cut = b.len();
    for i in tail_start.max(1)..b.len() {
        if b[i - 1].is_ascii_alphabetic() || b[i - 1] == b'.' {
            cut = i;
            break;
        }
    }
    let mut s = v[..cut].to_owned();
    // 2. In a prerelease, the first run of zeros and dots that starts the
    //    string or follows a dot, and is followed by a letter.
    if s.bytes().any(|c| c.is_ascii_alphabetic()) {
        let b = s.as_bytes();
        let mut found = None;
        let mut i = 0;
        while i < b.len() {
            if i > 0 && b[i - 1] != b'.' {
                i += 1;
                continue;
            }
            let mut m = i;
            while m < b.len() && matches!(b[m], b'0' | b'.') {
                m += 1;
            }
            if m > i && m < b.len() && b[m].is_ascii_alphabetic() {
                found = Some((i, m));
                break;
            }
            // Every later start inside this run ends where it ended: skip it
            // (keeps this linear).
            i = m.max(i + 1);
        }
        if let Some((i, m)) = found {
            s.replace_range(i..m, "");
        }
    }
    s
}

/// `scan(/\d+|[a-z]+/i)`.
fn partition(s: &str) -> Vec<GemSegment> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if b[i].is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = s[start..i].trim_start_matches('0');
            out.push(GemSegment::Number(if digits.is_empty() { "0".into() } else { digits.into() }));
        } else if b[i].is_ascii_alphabetic() {
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            out.push(GemSegment::Letters(s[start..i].into()));
        } else {
            i += 1;
        }
    }
    out
}

impl Ord for GemVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        // The shorter list is padded with zeros.
        let n = self.canonical.len().max(other.canonical.len());
        for i in 0..n {
            let ord = match (self.canonical.get(i), other.canonical.get(i)) {
                (Some(a), Some(b)) => a.cmp_to(b),
                (Some(a), None) => a.cmp_to_zero(),
                (None, Some(b)) => b.cmp_to_zero().reverse(),
                (None, None) => Ordering::Equal,
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

impl PartialOrd for GemVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for GemVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for GemVersion {}

impl std::hash::Hash for GemVersion {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // Canonical segments never end in a zero (but for the version `0`
        // itself), so equal versions have equal segment lists.
        self.canonical.hash(state);
    }
}

impl GemVersion {
    /// True if a segment is letters (`Gem::Version#prerelease?`, after `-`
    /// became `.pre.`).
    pub fn is_prerelease(&self) -> bool {
        self.canonical.iter().any(|s| matches!(s, GemSegment::Letters(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(scheme: Scheme, a: &str, b: &str) -> Ordering {
        scheme.parse(a).unwrap().cmp(&scheme.parse(b).unwrap())
    }

    #[test]
    fn numbers_of_any_length_compare_as_numbers() {
        let huge = "v1.18446744073709551616.0"; // u64::MAX + 1
        assert_eq!(order(Scheme::Go, huge, "v1.18446744073709551615.0"), Ordering::Greater);
        assert_eq!(order(Scheme::Go, "v99999999999999999999999.0.0", huge), Ordering::Greater);
        assert_eq!(
            order(Scheme::Go, "v100000000000000000000.0.0", "v99999999999999999999.0.0"),
            Ordering::Greater
        );
        assert_eq!(order(Scheme::SemVer, "1.0.0-99999999999999999999999", "1.0.0-2"), Ordering::Greater);
        assert!(Scheme::Go.parse("v01.0.0").is_err());
        assert!(Scheme::Go.parse("v1.0.0-").is_err());
        assert!(Scheme::Go.parse("v1.0.0+").is_err());
    }

    #[test]
    fn pep440_numbers_of_any_length_compare_as_numbers() {
        let pep = |a: &str, b: &str| order(Scheme::Pep440, a, b);
        let huge = "1.99999999999999999999999";
        // Above u64::MAX, not refused, not wrapped.
        assert_eq!(pep(huge, "1.18446744073709551615"), Ordering::Greater);
        assert_eq!(pep(huge, "1.18446744073709551616"), Ordering::Greater);
        assert_eq!(pep(huge, "2"), Ordering::Less);
        assert_eq!(pep(huge, "1.5"), Ordering::Greater);
        assert_eq!(pep("1.100000000000000000000000", huge), Ordering::Greater);
        assert_eq!(pep(huge, "1.99999999999999999999998"), Ordering::Greater);
        assert_eq!(pep(huge, "1.099999999999999999999999"), Ordering::Equal);
        // Every numeric part: epoch, pre, post, dev, local.
        assert_eq!(pep("99999999999999999999999!1.0", "18446744073709551615!9"), Ordering::Greater);
        assert_eq!(pep("1.0a99999999999999999999999", "1.0a18446744073709551615"), Ordering::Greater);
        assert_eq!(pep("1.0a99999999999999999999999", "1.0b0"), Ordering::Less);
        assert_eq!(pep("1.0.post99999999999999999999999", "1.0.post1"), Ordering::Greater);
        assert_eq!(pep("1.0.dev99999999999999999999999", "1.0.dev1"), Ordering::Greater);
        assert_eq!(pep("1.0.dev99999999999999999999999", "1.0a0"), Ordering::Less);
        assert_eq!(pep("1.0+99999999999999999999999", "1.0+18446744073709551616"), Ordering::Greater);
        assert_eq!(pep("1.0+99999999999999999999999", "1.0+abc"), Ordering::Greater);
        // Leading zeros are dropped, as `packaging` does; trailing zeros too.
        assert_eq!(pep("1.01", "1.1"), Ordering::Equal);
        assert_eq!(pep("01!1.0", "1!1"), Ordering::Equal);
        assert_eq!(pep("1.0.00", "1"), Ordering::Equal);
        assert_eq!(pep("0.0", "0"), Ordering::Equal);
        assert_eq!(pep("1.0+0001", "1.0+1"), Ordering::Equal);
        assert_eq!(pep("1.000000000000000000000000000001", "1.1"), Ordering::Equal);
        assert_eq!(Scheme::Pep440.parse("1.01").ok(), Scheme::Pep440.parse("1.1").ok());
        // A trailing separator with no number after it, as the pattern allows.
        assert_eq!(pep("1.0a-", "1.0a0"), Ordering::Equal);
        assert_eq!(pep("1.0-1", "1.0.post1"), Ordering::Equal);
        assert_eq!(pep("1.0a-1", "1.0a1"), Ordering::Equal);
    }

    #[test]
    fn shorthands_follow_each_ecosystem() {
        // x/mod/semver: v1 and v1.2 are v1.0.0 and v1.2.0, but only bare.
        assert_eq!(order(Scheme::Go, "v1", "v1.0.0"), Ordering::Equal);
        assert_eq!(order(Scheme::Go, "v1.2", "v1.2.0"), Ordering::Equal);
        assert!(Scheme::Go.parse("v1.2-pre").is_err());
        assert!(Scheme::Go.parse("v1.2+meta").is_err());
        // osv.dev: a missing minor or patch is zero, a leading v tolerated.
        assert_eq!(order(Scheme::Npm, "1.2", "1.2.0"), Ordering::Equal);
        assert_eq!(order(Scheme::Npm, "1.2-beta", "1.2.0-beta"), Ordering::Equal);
        assert_eq!(order(Scheme::SemVer, "v1", "1.0.0"), Ordering::Equal);
        assert!(Scheme::SemVer.parse("1.2.3.4").is_err());
        assert!(Scheme::SemVer.parse("").is_err());
    }

    #[test]
    fn build_metadata_is_ignored_for_ordering_local_labels_are_not() {
        assert_eq!(order(Scheme::Npm, "2.1.6+git", "2.1.6"), Ordering::Equal);
        assert_eq!(order(Scheme::Go, "v2.0.0+incompatible", "v2.0.0"), Ordering::Equal);
        // PEP 440 local labels count: a local version sorts above its
        // public version and below the next one.
        assert_eq!(order(Scheme::Pep440, "1.0+ubuntu1", "1.0"), Ordering::Greater);
        assert_eq!(order(Scheme::Pep440, "1.0+ubuntu1", "1.0.post0"), Ordering::Less);
        assert_eq!(order(Scheme::Pep440, "1.0+ubuntu1", "1.0.1"), Ordering::Less);
        let local = Scheme::Pep440.parse("1.0+ubuntu1").unwrap();
        assert_eq!(*local.public(), Scheme::Pep440.parse("1.0").unwrap());
        assert!(local.has_local() && !local.public().has_local());
    }
}
