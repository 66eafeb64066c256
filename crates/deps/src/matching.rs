//! Offline matching: which advisories affect a package version.
//!
//! [`Index::new`] groups the advisories' `affected[]` entries by (ecosystem,
//! name) and parses every range event version and every `versions` entry
//! once. Per name and scheme it keeps the sorted table of every version its
//! advisories mention and stores each bound as a position in that table, so
//! a query parses the package's version once, places it with one binary
//! search, and from there compares integers.
//!
//! # Rules (OSV schema, "Evaluation")
//!
//! - Only the five ecosystems gatehouse reads are indexed, by their exact OSV
//!   spelling (`npm`, `PyPI`, `Go`, `crates.io`, `RubyGems`); entries for any
//!   other ecosystem string (`Debian:11`, `GitHub Actions`, `npm:x`) are left
//!   out. Names compare as the ecosystem does: PEP 503-normalized on both
//!   sides for PyPI, exactly for the others.
//! - A withdrawn advisory never matches.
//! - A version equal to one of an entry's `versions` is affected: equal as a
//!   string, or equal in the ecosystem's ordering (PEP 440 `1.0` is `1.0.0`;
//!   Go's `v1.2.3` is OSV's `1.2.3`). A version that does not parse in its
//!   ecosystem's scheme is still matched against `versions` as a string
//!   (trimmed), so a legacy PyPI version such as `0.9-eevee` finds the
//!   advisories that list it; its ranges cannot be read (an
//!   [`MatchErrorCode::InvalidPackageVersion`] error, as before).
//! - PEP 440's local labels: a bound or listed version without one is
//!   compared with the package's public version (`1.0+ubuntu1` is `1.0`
//!   for `last_affected: 1.0` and for a listed `1.0`), as PEP 440 matches a
//!   specifier without a label; one with a label is compared with the whole
//!   version (`1.0+ubuntu1 < 1.0+ubuntu2`). Either way the version is
//!   compared the way PEP 440 orders versions (see [`crate::version`]).
//! - `SEMVER` ranges order by SemVer 2.0 precedence, `ECOSYSTEM` ranges by
//!   the ecosystem's own order (see [`crate::version`]). Events are sorted by
//!   version, `introduced: "0"` lowest, and walked as the pseudo-code does:
//!   at or above `introduced` → affected, at or above `fixed` → not, above
//!   `last_affected` → not. When `limit` events exist, the version must be
//!   below one of them (`"*"`: no limit). Events at the same version keep the
//!   order the advisory lists them in (a stable sort, as osv.dev's own
//!   evaluation does): `introduced X, fixed X` is an empty range, while
//!   `fixed X, ..., introduced X` re-opens at X.
//! - `GIT` ranges are read only for a package that carries a commit (a git
//!   dependency), and only where the range lists that commit itself: as
//!   `introduced` or `last_affected` it is affected, as `fixed` it is not
//!   (which decides only for a package with no version). Without the repository's
//!   history nothing else about a commit can be known offline, so a package
//!   with a commit *and a version* is matched by its version as usual (plus
//!   these exact hits), and one with a commit and no version can be decided
//!   only by such a hit: any other range of an advisory naming it is
//!   undecidable ([`MatchErrorCode::InvalidPackageVersion`]).
//! - Versions are read as [`crate::version`] says, with osv.dev's leniency
//!   for the SemVer schemes (`N` and `N.M` are `N.0.0` and `N.M.0`, a
//!   leading `v` is dropped), for event versions and package versions alike.
//!
//! # Errors
//!
//! What cannot be decided is a [`MatchError`], never "not affected": a range
//! type this code does not know, a range with no `introduced` event (or no
//! events), a package version that does not parse in the scheme a range
//! needs, or an event version that does not parse *and could change the
//! answer* for this package version. The error belongs to the package being
//! matched and names the advisory, so one broken advisory blocks only the
//! packages it names, and only the versions it cannot decide:
//!
//! - an entry whose `versions` list or another range says "affected" is
//!   affected, whatever its broken range would say;
//! - an unreadable event is allowed for at every place it could sort: if
//!   every placement gives the same answer, that is the answer (a range
//!   `[7.1.0, <unreadable fix>)` still says "not affected" for 7.0.9, and
//!   cannot say anything for 7.1.5).
//!
//! Matching does no I/O and keeps no clock: `withdrawn` is honoured whatever
//! its timestamp.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::osv::{Advisory, Event, RangeType};
use crate::package::{Ecosystem, Package, normalize_pypi_name};
use crate::version::{Scheme, Version, VersionError};

const ECOSYSTEMS: [Ecosystem; 5] =
    [Ecosystem::Npm, Ecosystem::PyPI, Ecosystem::Go, Ecosystem::CratesIo, Ecosystem::RubyGems];

const fn eco_index(e: Ecosystem) -> usize {
    match e {
        Ecosystem::Npm => 0,
        Ecosystem::PyPI => 1,
        Ecosystem::Go => 2,
        Ecosystem::CratesIo => 3,
        Ecosystem::RubyGems => 4,
    }
}

/// The gatehouse ecosystem an OSV ecosystem string names, if any: exact
/// spellings only (`Debian:11`, `pypi` and `npm:foo` name none).
pub fn ecosystem_from_osv(s: &str) -> Option<Ecosystem> {
    ECOSYSTEMS.into_iter().find(|e| e.as_str() == s)
}

/// Why a package could not be matched against an advisory. The codes are
/// stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchErrorCode {
    /// A range `type` other than `SEMVER`, `ECOSYSTEM` and `GIT`.
    UnknownRangeType,
    /// A range event's version does not parse in the range's scheme.
    InvalidEventVersion,
    /// A range with no events, or with no `introduced` event.
    InvalidRange,
    /// The package's version does not parse in the scheme a range needs.
    InvalidPackageVersion,
}

impl MatchErrorCode {
    /// The stable wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownRangeType => "unknown_range_type",
            Self::InvalidEventVersion => "invalid_event_version",
            Self::InvalidRange => "invalid_range",
            Self::InvalidPackageVersion => "invalid_package_version",
        }
    }
}

/// A package whose match against one advisory could not be decided. The
/// caller treats it as an errored scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{advisory}: {}/{}@{}: {message} ({})", package.ecosystem, package.name, package.version, code.as_str())]
pub struct MatchError {
    /// Why.
    pub code: MatchErrorCode,
    /// The advisory that could not be evaluated.
    pub advisory: String,
    /// The package being matched.
    pub package: Package,
    /// What is wrong, for a person.
    pub message: String,
}

/// Everything known about one package: the advisories that affect it, and the
/// ones that could not be evaluated for it (never the same advisory twice).
#[derive(Debug, Clone, Default)]
pub struct Evaluation<'a> {
    /// Affecting advisories, sorted by id.
    pub affected: Vec<&'a Advisory>,
    /// Advisories that could not be decided, sorted by advisory id.
    pub errors: Vec<MatchError>,
}

/// A bound in a compiled range, before indexing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Bound {
    /// `introduced: "0"`: below every version.
    Zero,
    At(Version),
    /// A `limit` containing `*`: above every version.
    Infinity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Introduced,
    Fixed,
    LastAffected,
}

/// A range ready to evaluate. `P` is how bounds are held: [`Bound`] (a
/// range compiled on its own, for [`fixed_versions`]) or a `u32` position in
/// the index's sorted table of the package's versions (see [`Group`]): the
/// same order, compared as integers.
#[derive(Debug, Clone)]
struct CompiledRange<P> {
    scheme: Scheme,
    /// Sorted by bound, stable (ties in listed order), with each event's
    /// place in the advisory's list; no `limit` here.
    events: Vec<(P, Kind, u32)>,
    /// `limit` bounds; empty (and no unreadable limit) means no limit.
    limits: Vec<P>,
    /// Events whose version does not parse: where they sit is unknown.
    unreadable: Vec<Unreadable>,
}

/// An event whose version does not parse in the range's scheme.
#[derive(Debug, Clone)]
struct Unreadable {
    /// `None` for a `limit`.
    kind: Option<Kind>,
    /// Its place in the advisory's list.
    index: u32,
    message: String,
}

impl<P: Ord> CompiledRange<P> {
    /// Whether `v` is in the range: `Ok` when decided, `Err` (the first
    /// unreadable event) when an event that does not parse could change the
    /// answer.
    ///
    /// The walk's answer is the effect of the last event that fires (an
    /// `introduced` or `fixed` at or below `v`, a `last_affected` below
    /// `v`). An unreadable event either does not fire or fires before that
    /// one, leaving the readable events' answer, or fires last, making it
    /// "affected" (`introduced`) or "not affected" (`fixed`,
    /// `last_affected`). So the answer is known exactly when every
    /// unreadable event that could fire last agrees with the readable
    /// answer; an unreadable `limit` adds "not affected" (the version may be
    /// above it) unless a readable limit is already above the version.
    ///
    /// `at` orders a bound against the version: `at(bound)` is
    /// `bound.cmp(version)`, with the version read as that bound needs it
    /// (its public version for a PEP 440 bound without a local label). The
    /// bounds that come out at or below the version are always a prefix of
    /// the sorted events: a bound below one that is at or below the version
    /// is at or below it too, label or not.
    fn contains(&self, at: impl Fn(&P) -> Ordering) -> Result<bool, &Unreadable> {
        let unreadable_limit = self.unreadable.iter().any(|u| u.kind.is_none());
        let below_a_limit = self.limits.iter().any(|l| at(l) == Ordering::Greater);
        let before_limits = if (self.limits.is_empty() && !unreadable_limit) || below_a_limit {
            Some(true)
        } else if unreadable_limit {
            None
        } else {
            Some(false)
        };
        if before_limits == Some(false) {
            return Ok(false);
        }
        let mut vulnerable = false;
        // The last event that changed the answer: where its bound is
        // relative to `v` (below or at) and its place in the advisory's list.
        let mut last_change: Option<(Ordering, u32)> = None;
        for (bound, kind, index) in &self.events {
            let ord = at(bound);
            if ord == Ordering::Greater {
                // Every later event is at or above this one: none can fire.
                break;
            }
            match kind {
                Kind::Introduced => vulnerable = true,
                Kind::Fixed => vulnerable = false,
                Kind::LastAffected if ord == Ordering::Less => vulnerable = false,
                Kind::LastAffected => continue,
            }
            last_change = Some((ord, *index));
        }
        if self.unreadable.is_empty() {
            return Ok(vulnerable);
        }
        // An unreadable event could change the answer only if it could sort
        // after that last change and still fire: anywhere above it when it
        // is below `v`; when it is at `v`, only at `v` itself, listed after
        // it (ties keep listed order), and not as a `last_affected` (which
        // must be below `v` to fire).
        let could_fire_last = |u: &Unreadable| match last_change {
            None | Some((Ordering::Less, _)) => true,
            Some((_, at)) => u.kind != Some(Kind::LastAffected) && u.index > at,
        };
        let contradicting = self.unreadable.iter().find(|u| match u.kind {
            Some(Kind::Introduced) => !vulnerable && could_fire_last(u),
            Some(Kind::Fixed | Kind::LastAffected) => vulnerable && could_fire_last(u),
            None => vulnerable && before_limits.is_none(),
        });
        match contradicting {
            None => Ok(vulnerable),
            Some(u) => Err(u),
        }
    }

    fn map<Q>(self, mut f: impl FnMut(P) -> Q) -> CompiledRange<Q> {
        CompiledRange {
            scheme: self.scheme,
            events: self.events.into_iter().map(|(b, k, i)| (f(b), k, i)).collect(),
            limits: self.limits.into_iter().map(f).collect(),
            unreadable: self.unreadable,
        }
    }
}

#[derive(Debug, Clone)]
struct Broken {
    code: MatchErrorCode,
    message: String,
}

#[derive(Debug, Clone)]
enum Compiled<P> {
    Range(CompiledRange<P>),
    Broken(Broken),
}

fn compile_range(ecosystem: Ecosystem, range_type: &RangeType, events: &[Event]) -> Option<Compiled<Bound>> {
    let scheme = match range_type {
        RangeType::Git => return None,
        RangeType::Semver => Scheme::semver_range(ecosystem),
        RangeType::Ecosystem => Scheme::of(ecosystem),
        RangeType::Other(t) => {
            return Some(Compiled::Broken(Broken {
                code: MatchErrorCode::UnknownRangeType,
                message: format!("range type {:?} is not SEMVER, ECOSYSTEM or GIT", cut(t)),
            }));
        }
    };
    if !events.iter().any(|e| matches!(e, Event::Introduced(_))) {
        let message =
            if events.is_empty() { "a range with no events" } else { "a range with no introduced event" };
        return Some(Compiled::Broken(Broken {
            code: MatchErrorCode::InvalidRange,
            message: message.to_owned(),
        }));
    }
    let mut sorted = Vec::with_capacity(events.len());
    let mut limits = Vec::new();
    let mut unreadable = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        let kind = match event {
            Event::Introduced(_) => Some(Kind::Introduced),
            Event::Fixed(_) => Some(Kind::Fixed),
            Event::LastAffected(_) => Some(Kind::LastAffected),
            Event::Limit(_) => None,
        };
        let bound = match event {
            Event::Introduced(v) if v == "0" => Bound::Zero,
            Event::Limit(v) if v.contains('*') => Bound::Infinity,
            _ => match scheme.parse(event.version()) {
                Ok(v) => Bound::At(v),
                Err(e) => {
                    let name = match event {
                        Event::Introduced(_) => "introduced",
                        Event::Fixed(_) => "fixed",
                        Event::LastAffected(_) => "last_affected",
                        Event::Limit(_) => "limit",
                    };
                    let message = format!("{} range, {name} event: {e}", range_type.as_str());
                    unreadable.push(Unreadable { kind, index, message });
                    continue;
                }
            },
        };
        match kind {
            Some(k) => sorted.push((bound, k, index)),
            None => limits.push(bound),
        }
    }
    // Stable: events at one version stay in the order listed.
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    Some(Compiled::Range(CompiledRange { scheme, events: sorted, limits, unreadable }))
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Position 0: `introduced: "0"`, below every version.
const ZERO: u32 = 0;
/// The top position: a `limit` of `*`, above every version.
const INFINITY: u32 = u32::MAX;

/// Every version one package name's advisories mention in one scheme,
/// sorted and deduplicated. A version's position is `2i + 2` when it is the
/// table's `i`-th entry and `2i + 1` when it sorts between entries `i - 1`
/// and `i`: positions compare as the versions do, so a query finds its
/// position once (one binary search) and then compares integers.
#[derive(Debug, Default)]
struct Table {
    sorted: Vec<Version>,
}

impl Table {
    fn position(&self, v: &Version) -> u32 {
        let slot = match self.sorted.binary_search(v) {
            Ok(i) => 2 * i + 2,
            Err(i) => 2 * i + 1,
        };
        u32::try_from(slot).unwrap_or(INFINITY - 1)
    }

    /// True if `position` is a table entry with a PEP 440 local label.
    fn has_local(&self, position: u32) -> bool {
        position.is_multiple_of(2)
            && position != ZERO
            && usize::try_from(position / 2 - 1)
                .ok()
                .and_then(|i| self.sorted.get(i))
                .is_some_and(Version::has_local)
    }

    fn bound(&self, b: Bound) -> u32 {
        match b {
            Bound::Zero => ZERO,
            Bound::At(v) => self.position(&v),
            Bound::Infinity => INFINITY,
        }
    }
}

/// One `affected[]` entry, compiled against its group's tables.
#[derive(Debug)]
struct Entry {
    advisory: u32,
    affected: u32,
    /// Positions of the `versions` that parse in the ecosystem's scheme.
    versions: Vec<u32>,
    /// The `versions` that do not (matched as strings only).
    unparsed_versions: Vec<Box<str>>,
    ranges: Vec<Compiled<u32>>,
    git: GitRanges,
}

/// Everything indexed under one (ecosystem, name).
#[derive(Debug, Default)]
struct Group {
    tables: [Table; Scheme::COUNT],
    entries: Vec<Entry>,
}

/// An entry before its group's tables exist.
struct RawEntry {
    advisory: u32,
    affected: u32,
    versions: Vec<Version>,
    unparsed_versions: Vec<Box<str>>,
    ranges: Vec<Compiled<Bound>>,
    git: GitRanges,
}

/// What an entry's `GIT` ranges say without the repository's history: the
/// commits they list as affected (`introduced`, `last_affected`) and as
/// fixed, lowercased.
#[derive(Debug, Default)]
struct GitRanges {
    count: usize,
    affected: Vec<Box<str>>,
    fixed: Vec<Box<str>>,
}

impl GitRanges {
    fn new(ranges: &[crate::osv::Range]) -> Self {
        let mut out = Self::default();
        for r in ranges.iter().filter(|r| r.kind == RangeType::Git) {
            out.count += 1;
            for e in &r.events {
                match e {
                    Event::Introduced(c) | Event::LastAffected(c) if c != "0" => {
                        out.affected.push(c.to_ascii_lowercase().into());
                    }
                    Event::Fixed(c) => out.fixed.push(c.to_ascii_lowercase().into()),
                    _ => {}
                }
            }
        }
        out
    }

    /// Whether a range lists `commit` (a full hash, or a prefix of at
    /// least 7 hex digits as lockfiles sometimes abbreviate) among `listed`.
    fn lists(listed: &[Box<str>], commit: &str) -> bool {
        let commit = commit.to_ascii_lowercase();
        commit.len() >= 7 && listed.iter().any(|c| c.starts_with(commit.as_str()))
    }
}

impl Group {
    fn build(ecosystem: Ecosystem, raw: Vec<RawEntry>) -> Self {
        let mut all: [Vec<Version>; Scheme::COUNT] = Default::default();
        let own = Scheme::of(ecosystem).index();
        for e in &raw {
            all[own].extend(e.versions.iter().cloned());
            for r in &e.ranges {
                if let Compiled::Range(r) = r {
                    let into = &mut all[r.scheme.index()];
                    for b in r.events.iter().map(|e| &e.0).chain(&r.limits) {
                        if let Bound::At(v) = b {
                            into.push(v.clone());
                        }
                    }
                }
            }
        }
        let mut group = Self::default();
        for (table, mut versions) in group.tables.iter_mut().zip(all) {
            versions.sort();
            versions.dedup();
            table.sorted = versions;
        }
        group.entries = raw
            .into_iter()
            .map(|e| {
                let mut versions: Vec<u32> =
                    e.versions.iter().map(|v| group.tables[own].position(v)).collect();
                versions.sort_unstable();
                versions.dedup();
                let ranges = e
                    .ranges
                    .into_iter()
                    .map(|r| match r {
                        Compiled::Broken(b) => Compiled::Broken(b),
                        Compiled::Range(r) => {
                            let table = &group.tables[r.scheme.index()];
                            Compiled::Range(r.map(|b| table.bound(b)))
                        }
                    })
                    .collect();
                Entry {
                    advisory: e.advisory,
                    affected: e.affected,
                    versions,
                    unparsed_versions: e.unparsed_versions,
                    ranges,
                    git: e.git,
                }
            })
            .collect();
        group
    }
}

/// Advisories indexed by the packages they name.
#[derive(Debug, Default)]
pub struct Index {
    advisories: Vec<Advisory>,
    by_name: [HashMap<Box<str>, Group>; 5],
    withdrawn: usize,
    duplicates: usize,
    other_ecosystems: usize,
}

/// `modified` as a sortable key: RFC 3339 UTC with optional fractional
/// seconds (`...:00Z` and `...:00.5Z` compare by time, not by bytes).
fn modified_key(s: &str) -> (&str, &str) {
    let s = s.strip_suffix('Z').unwrap_or(s);
    match s.split_once('.') {
        Some((main, frac)) => (main, frac.trim_end_matches('0')),
        None => (s, ""),
    }
}

fn same_name_key(ecosystem: Ecosystem, name: &str) -> Cow<'_, str> {
    match ecosystem {
        Ecosystem::PyPI => Cow::Owned(normalize_pypi_name(name)),
        _ => Cow::Borrowed(name),
    }
}

impl Index {
    /// Indexes `advisories`. Never fails: an advisory whose ranges cannot be
    /// read is kept, and reported by [`Index::affecting`] for the packages it
    /// names. When two advisories share an id, the one with the later
    /// `modified` is kept (the first one on a tie), as the schema says.
    pub fn new(advisories: Vec<Advisory>) -> Self {
        let mut index = Self::default();

        // Latest `modified` per id.
        let mut keep: HashMap<&str, usize> = HashMap::with_capacity(advisories.len());
        for (i, a) in advisories.iter().enumerate() {
            match keep.get(a.id.as_str()) {
                Some(&j) => {
                    index.duplicates += 1;
                    if modified_key(&a.modified) > modified_key(&advisories[j].modified) {
                        keep.insert(&a.id, i);
                    }
                }
                None => {
                    keep.insert(&a.id, i);
                }
            }
        }
        let kept: HashSet<usize> = keep.into_values().collect();
        let mut advisories: Vec<Advisory> =
            advisories.into_iter().enumerate().filter(|(i, _)| kept.contains(i)).map(|(_, a)| a).collect();
        advisories.sort_by(|a, b| a.id.cmp(&b.id));

        let mut raw: [HashMap<Box<str>, Vec<RawEntry>>; 5] = Default::default();
        for (ai, advisory) in advisories.iter().enumerate() {
            if advisory.is_withdrawn() {
                index.withdrawn += 1;
                continue;
            }
            for (fi, affected) in advisory.affected.iter().enumerate() {
                let Some(package) = &affected.package else { continue };
                let Some(ecosystem) = ecosystem_from_osv(&package.ecosystem) else {
                    index.other_ecosystems += 1;
                    continue;
                };
                let scheme = Scheme::of(ecosystem);
                let mut versions = Vec::with_capacity(affected.versions.len());
                let mut unparsed_versions = Vec::new();
                for v in &affected.versions {
                    match scheme.parse(v) {
                        Ok(p) => versions.push(p),
                        Err(_) => unparsed_versions.push(v.as_str().into()),
                    }
                }
                let ranges = affected
                    .ranges
                    .iter()
                    .filter_map(|r| compile_range(ecosystem, &r.kind, &r.events))
                    .collect();
                let entry = RawEntry {
                    advisory: u32::try_from(ai).unwrap_or(u32::MAX),
                    affected: u32::try_from(fi).unwrap_or(u32::MAX),
                    versions,
                    unparsed_versions,
                    ranges,
                    git: GitRanges::new(&affected.ranges),
                };
                let name: Box<str> = same_name_key(ecosystem, &package.name).into();
                raw[eco_index(ecosystem)].entry(name).or_default().push(entry);
            }
        }
        for (ecosystem, raw) in ECOSYSTEMS.into_iter().zip(raw) {
            index.by_name[eco_index(ecosystem)] =
                raw.into_iter().map(|(name, entries)| (name, Group::build(ecosystem, entries))).collect();
        }
        index.advisories = advisories;
        index
    }

    /// The advisories (not withdrawn) with a `GIT` range that lists `commit`
    /// as affected: the answer an offline database can give to OSV's commit
    /// query, which OSV itself answers from the repository's history.
    pub fn listing_commit(&self, commit: &str) -> Vec<&Advisory> {
        self.advisories
            .iter()
            .filter(|a| !a.is_withdrawn())
            .filter(|a| {
                a.affected.iter().any(|e| GitRanges::lists(&GitRanges::new(&e.ranges).affected, commit))
            })
            .collect()
    }

    /// The advisories (not withdrawn) with an `affected[]` entry for
    /// `package` whose `versions` list holds its version exactly: equal as
    /// strings once both are trimmed, nothing looser. All that can be said of
    /// a version its ecosystem's scheme cannot read (a legacy PyPI version
    /// such as `0.9-eevee`), whose ranges cannot be evaluated; sorted by id.
    pub fn listing_version(&self, package: &Package) -> Vec<&Advisory> {
        let name = same_name_key(package.ecosystem, &package.name);
        let Some(group) = self.by_name[eco_index(package.ecosystem)].get(&*name) else {
            return Vec::new();
        };
        let mut out: Vec<&Advisory> = Vec::new();
        for entry in &group.entries {
            let advisory = &self.advisories[entry.advisory as usize];
            // Entries of one advisory are adjacent: `last` is enough to dedup.
            if out.last().is_none_or(|a| a.id != advisory.id) && lists_version(advisory, package) {
                out.push(advisory);
            }
        }
        out
    }

    /// The advisories held (withdrawn ones included), sorted by id, one per id.
    pub fn advisories(&self) -> &[Advisory] {
        &self.advisories
    }

    /// The advisory with this id.
    pub fn get(&self, id: &str) -> Option<&Advisory> {
        self.advisories.binary_search_by(|a| a.id.as_str().cmp(id)).ok().map(|i| &self.advisories[i])
    }

    /// How many advisories are held.
    pub fn len(&self) -> usize {
        self.advisories.len()
    }

    /// True if no advisory is held.
    pub fn is_empty(&self) -> bool {
        self.advisories.is_empty()
    }

    /// How many withdrawn advisories were left out of matching.
    pub fn withdrawn(&self) -> usize {
        self.withdrawn
    }

    /// How many advisories were dropped for sharing an id with a later one.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// How many `affected[]` entries name an ecosystem gatehouse does not read.
    pub fn other_ecosystem_entries(&self) -> usize {
        self.other_ecosystems
    }

    /// How many distinct (ecosystem, name) pairs are indexed.
    pub fn package_names(&self) -> usize {
        self.by_name.iter().map(HashMap::len).sum()
    }

    /// The advisories that affect `package`, sorted by id; an error if any
    /// advisory naming the package could not be evaluated for it (the first
    /// by advisory id; [`Index::evaluate`] gives them all).
    #[allow(clippy::result_large_err, reason = "the rare path; its size is the package it names")]
    pub fn affecting(&self, package: &Package) -> Result<Vec<&Advisory>, MatchError> {
        let mut evaluation = self.evaluate(package);
        if evaluation.errors.is_empty() {
            Ok(evaluation.affected)
        } else {
            Err(evaluation.errors.swap_remove(0))
        }
    }

    /// The advisories that affect `package` and those that could not be
    /// evaluated for it.
    pub fn evaluate(&self, package: &Package) -> Evaluation<'_> {
        let name = same_name_key(package.ecosystem, &package.name);
        let Some(group) = self.by_name[eco_index(package.ecosystem)].get(&*name) else {
            return Evaluation::default();
        };
        let mut query = Query::new(&package.version, package.ecosystem, group);
        query.commit = package.commit.as_deref();
        let mut out = Evaluation::default();
        // Entries of one advisory are adjacent (indexed in advisory order):
        // an advisory affects the package if any of its entries does, and is
        // undecidable only if none does and one cannot be decided.
        let mut i = 0;
        while i < group.entries.len() {
            let advisory = group.entries[i].advisory;
            let mut affected = false;
            let mut broken = None;
            while i < group.entries.len() && group.entries[i].advisory == advisory {
                if !affected {
                    match self.entry_affects(&group.entries[i], &mut query) {
                        Ok(hit) => affected = hit,
                        Err(b) => {
                            broken.get_or_insert(b);
                        }
                    }
                }
                i += 1;
            }
            let a = &self.advisories[advisory as usize];
            if affected {
                out.affected.push(a);
            } else if let Some(b) = broken {
                out.errors.push(MatchError {
                    code: b.code,
                    advisory: a.id.clone(),
                    package: package.clone(),
                    message: b.message,
                });
            }
        }
        out
    }

    fn entry_affects(&self, entry: &Entry, query: &mut Query<'_>) -> Result<bool, Broken> {
        if query.commit.is_some_and(|c| GitRanges::lists(&entry.git.affected, c)) {
            return Ok(true);
        }
        if query.raw.is_empty() {
            // A git dependency with a commit and no version: only a GIT range
            // listing the commit decides (one that lists it as fixed says
            // the commit is not affected); anything else cannot be evaluated.
            if query.commit.is_some_and(|c| GitRanges::lists(&entry.git.fixed, c)) {
                return Ok(false);
            }
            let decides_nothing = entry.versions.is_empty()
                && entry.unparsed_versions.is_empty()
                && entry.ranges.is_empty()
                && entry.git.count == 0;
            return if decides_nothing {
                Ok(false)
            } else {
                Err(Broken {
                    code: MatchErrorCode::InvalidPackageVersion,
                    message: "no version, only a commit, and no GIT range of this advisory lists that commit"
                        .to_owned(),
                })
            };
        }
        if !entry.versions.is_empty() || !entry.unparsed_versions.is_empty() {
            if entry.unparsed_versions.iter().any(|v| v.trim() == query.raw.trim()) {
                return Ok(true);
            }
            match query.position(Scheme::of(query.ecosystem)) {
                Ok(at) => {
                    // The whole version, or its public version for a listed
                    // version without a local label (the public version's
                    // position is a table entry only if that entry has none).
                    if entry.versions.binary_search(&at.full).is_ok()
                        || entry.versions.binary_search(&at.public).is_ok()
                    {
                        return Ok(true);
                    }
                }
                Err(_) => {
                    let listed = &self.advisories[entry.advisory as usize].affected[entry.affected as usize];
                    if listed.versions.iter().any(|v| v.trim() == query.raw.trim()) {
                        return Ok(true);
                    }
                }
            }
        }
        let mut broken = None;
        for range in &entry.ranges {
            match range {
                Compiled::Broken(b) => {
                    broken.get_or_insert_with(|| b.clone());
                }
                Compiled::Range(r) => match query.position(r.scheme) {
                    Ok(at) => match r.contains(|b| {
                        let table = &query.group.tables[r.scheme.index()];
                        b.cmp(if table.has_local(*b) { &at.full } else { &at.public })
                    }) {
                        Ok(true) => return Ok(true),
                        Ok(false) => {}
                        Err(u) => {
                            broken.get_or_insert_with(|| Broken {
                                code: MatchErrorCode::InvalidEventVersion,
                                message: format!("{}; it could be on either side of this version", u.message),
                            });
                        }
                    },
                    Err(e) => {
                        broken.get_or_insert_with(|| Broken {
                            code: MatchErrorCode::InvalidPackageVersion,
                            message: e.to_string(),
                        });
                    }
                },
            }
        }
        match broken {
            Some(b) => Err(b),
            None => Ok(false),
        }
    }
}

/// The package version, parsed and placed in the group's tables at most once
/// per scheme.
struct Query<'a> {
    raw: &'a str,
    /// A git dependency's commit.
    commit: Option<&'a str>,
    ecosystem: Ecosystem,
    group: &'a Group,
    slots: [Option<Result<Placed, VersionError>>; Scheme::COUNT],
}

/// A package version's positions in a table: the whole version's, and its
/// public version's (the same but for a PEP 440 version with a local label).
#[derive(Debug, Clone, Copy)]
struct Placed {
    full: u32,
    public: u32,
}

impl<'a> Query<'a> {
    fn new(raw: &'a str, ecosystem: Ecosystem, group: &'a Group) -> Self {
        Self { raw, commit: None, ecosystem, group, slots: Default::default() }
    }

    fn position(&mut self, scheme: Scheme) -> Result<Placed, &VersionError> {
        let (raw, group) = (self.raw, self.group);
        let slot = self.slots[scheme.index()].get_or_insert_with(|| {
            scheme.parse(raw).map(|v| {
                let table = &group.tables[scheme.index()];
                Placed { full: table.position(&v), public: table.position(&v.public()) }
            })
        });
        slot.as_ref().map(|p| *p)
    }
}

/// Whether `advisory` (not withdrawn) lists `package`'s exact version in the
/// `versions` of an `affected[]` entry for the package: equal as strings
/// once both are trimmed. What [`Index::listing_version`] asks of each
/// advisory, for one fetched on its own (the OSV API's answers).
pub fn lists_version(advisory: &Advisory, package: &Package) -> bool {
    let version = package.version.trim();
    let name = same_name_key(package.ecosystem, &package.name);
    !version.is_empty()
        && !advisory.is_withdrawn()
        && advisory.affected.iter().any(|a| {
            a.package.as_ref().is_some_and(|p| {
                ecosystem_from_osv(&p.ecosystem) == Some(package.ecosystem)
                    && same_name_key(package.ecosystem, &p.name) == name
            }) && a.versions.iter().any(|v| v.trim() == version)
        })
}

/// The `fixed` versions that would end `package`'s exposure to `advisory`:
/// the `fixed` events, above the package's version, of the `SEMVER` and
/// `ECOSYSTEM` ranges that contain it, in ascending order, each once, as the
/// advisory spells them. Empty when no range contains the version (affected
/// through `versions` alone, say) or a containing range has no fix. Ranges
/// that cannot be evaluated are skipped: [`Index::affecting`] reports them.
pub fn fixed_versions(advisory: &Advisory, package: &Package) -> Vec<String> {
    let name = same_name_key(package.ecosystem, &package.name);
    let mut parsed: [Option<Option<Version>>; Scheme::COUNT] = Default::default();
    let mut found: Vec<(Version, &str)> = Vec::new();
    for affected in &advisory.affected {
        let Some(p) = &affected.package else { continue };
        if ecosystem_from_osv(&p.ecosystem) != Some(package.ecosystem)
            || same_name_key(package.ecosystem, &p.name) != name
        {
            continue;
        }
        for range in &affected.ranges {
            let Some(Compiled::Range(r)) = compile_range(package.ecosystem, &range.kind, &range.events)
            else {
                continue;
            };
            let v = parsed[r.scheme.index()].get_or_insert_with(|| r.scheme.parse(&package.version).ok());
            let Some(v) = v.as_ref() else { continue };
            let public = v.public();
            // As the index compares: a bound without a local label against
            // the public version.
            let at = |b: &Bound| match b {
                Bound::Zero => Ordering::Less,
                Bound::Infinity => Ordering::Greater,
                Bound::At(x) => x.cmp(if x.has_local() { v } else { &public }),
            };
            if !matches!(r.contains(at), Ok(true)) {
                continue;
            }
            for (bound, kind, i) in &r.events {
                if let (Kind::Fixed, Bound::At(fixed)) = (kind, bound)
                    && at(bound) == Ordering::Greater
                {
                    found.push((fixed.clone(), range.events[*i as usize].version()));
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.dedup_by(|a, b| a.0 == b.0);
    found.into_iter().map(|(_, s)| s.to_owned()).collect()
}

impl fmt::Display for MatchErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
