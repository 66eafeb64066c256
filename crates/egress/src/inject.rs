//! Credential leases at the door: which lease's credential goes into a
//! request, putting it there, and scrubbing it out of the answer.
//!
//! A run never holds a credential. It holds a lease's *placeholder*
//! (`gatehouse_lease_<32 hex>`), and the door puts the stored secret in its
//! place on the way out — only toward the lease's one host. This module is
//! the decision and the rewriting, and nothing else: no I/O and no clock
//! reads (callers pass `now`), so that every rule here can be tested to the
//! byte, and so that the proxy and the fetch API cannot disagree about it.
//!
//! - [`examine`] reads a request and says which lease (if any) it gets, or
//!   why it is refused — and whether the refusal is a leak attempt whose
//!   lease must be revoked at once.
//! - [`apply`] writes the secret into the request's headers (never into a
//!   URL: upstreams log those) and returns the [`Scrub`] its answer must
//!   pass through, so an upstream that echoes a credential back (error
//!   pages, debug endpoints, token introspection) does not hand it to the
//!   run.
//! - [`carries_secret`] finds a raw secret the run somehow learned and sends
//!   toward another host.
//!
//! Nothing here puts a secret into a `Debug` output, an error or a log line:
//! errors are [`Reason`] codes, [`Scrub`] and [`Scrubber`] print only
//! counts, and the copies of a secret this module keeps are zeroized when
//! dropped.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::GeneralPurpose;
use base64::engine::general_purpose::{PAD_INDIFFERENT, STANDARD};
use gatehouse_core::{Reason, UnixTime};
use http::{HeaderMap, HeaderName, HeaderValue, header};
use zeroize::Zeroizing;

pub use crate::scrub::{Scrub, ScrubBody, Scrubber};

/// What a rule's format holds where the secret goes.
const SECRET_MARK: &str = "{secret}";
/// The longest header format a rule may have.
const MAX_FORMAT_BYTES: usize = 256;
/// The longest Basic user name a rule may have.
const MAX_USERNAME_BYTES: usize = 128;

/// Reads Basic credentials the way clients write them: standard alphabet,
/// padding optional, stray trailing bits tolerated. Leniency here only makes
/// more requests *recognized* as carrying a placeholder; what is written is
/// always canonical [`STANDARD`].
const LENIENT_BASE64: GeneralPurpose =
    GeneralPurpose::new(&base64::alphabet::STANDARD, PAD_INDIFFERENT.with_decode_allow_trailing_bits(true));

/// How a credential goes into a request when the sandbox did not place the
/// placeholder itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectRule {
    /// `name: format` with `{secret}` replaced, e.g. Authorization:
    /// `Bearer {secret}` / `token {secret}`.
    Header {
        /// The header the credential goes into.
        name: HeaderName,
        /// Its value, `{secret}` standing for the credential (exactly once).
        format: String,
    },
    /// `Authorization: Basic base64(username:secret)` (git over HTTPS uses
    /// `x-access-token`).
    Basic {
        /// The user name sent beside the secret.
        username: String,
    },
}

impl InjectRule {
    /// Validates a header rule given by an API caller.
    ///
    /// The name must be a valid field name and not one only gatehouse sets
    /// (hop-by-hop, `Host`, `Content-Length`, `Transfer-Encoding`,
    /// `Connection`, `TE`, `Upgrade`, `Expect`, any `Proxy-*`); `Cookie` is
    /// allowed. The format must contain `{secret}` exactly once (so the
    /// credential is neither dropped nor sent twice), be at most 256 bytes,
    /// and otherwise hold only visible ASCII and spaces: no control
    /// character can split the header.
    ///
    /// The error explains the refusal to the API caller.
    pub fn header(name: &str, format: &str) -> Result<Self, &'static str> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| "the header name is not a valid HTTP field name")?;
        check_header_rule(&name, format)?;
        Ok(InjectRule::Header { name, format: format.to_owned() })
    }

    /// Validates a Basic rule given by an API caller: the user name is 1 to
    /// 128 bytes of visible ASCII without `:` (which would move the split
    /// between user and secret).
    ///
    /// The error explains the refusal to the API caller.
    pub fn basic(username: &str) -> Result<Self, &'static str> {
        check_username(username)?;
        Ok(InjectRule::Basic { username: username.to_owned() })
    }
}

/// Headers a rule may never set: what only gatehouse sets (framing and
/// connection management, which would let a rule smuggle a second request
/// or cut the body; `Host`; `Expect`), and any `proxy-*`.
fn reserved_header(name: &HeaderName) -> bool {
    let name = name.as_str();
    crate::http1::gatehouse_only(name) || name.starts_with("proxy-")
}

fn check_header_rule(name: &HeaderName, format: &str) -> Result<(), &'static str> {
    if reserved_header(name) {
        return Err(
            "gatehouse alone sets this header (message framing, hop-by-hop, Host, Expect or Proxy-*)",
        );
    }
    if format.len() > MAX_FORMAT_BYTES {
        return Err("the format is longer than 256 bytes");
    }
    if !format.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Err("the format may hold only visible ASCII characters and spaces");
    }
    if format.matches(SECRET_MARK).count() != 1 {
        return Err("the format must contain {secret} exactly once");
    }
    Ok(())
}

fn check_username(username: &str) -> Result<(), &'static str> {
    if username.is_empty() || username.len() > MAX_USERNAME_BYTES {
        return Err("the user name must be 1 to 128 bytes long");
    }
    if !username.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
        return Err("the user name may hold only visible ASCII characters, and no ':'");
    }
    Ok(())
}

/// How a lease's credential goes into a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Its secret (stored, or a token minted from what is stored) goes in
    /// by this rule.
    Inject(InjectRule),
    /// The request is signed with AWS Signature Version 4 for this scope
    /// ([`crate::sigv4`]); no placeholder has a place in it.
    SigV4(gatehouse_capability::sigv4::Scope),
}

/// Where a lease stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Usable until `expires_at` (exclusive).
    Live {
        /// When the lease runs out unless a heartbeat renews it.
        expires_at: UnixTime,
    },
    /// Revoked; `run_ended` when it was revoked because its run stopped
    /// being live.
    Revoked {
        /// The run ended (or was cancelled, killed, expired): the refusal
        /// says `run_not_live`, which tells the agent more than
        /// `lease_revoked`.
        run_ended: bool,
    },
}

/// One lease of the run, as the door sees it (no secret in here).
#[derive(Clone, Debug)]
pub struct LeaseEntry {
    /// The lease's id (`lease_<32 hex>`).
    pub lease_id: String,
    /// What the sandbox holds instead of the secret, e.g.
    /// `gatehouse_lease_0193…` (see [`placeholder_for`]).
    pub placeholder: String,
    /// The one host the lease is for, normalized as [`crate::target`]
    /// normalizes hosts: lowercase ASCII (IDNA applied), no trailing dot.
    pub host: String,
    /// When it was granted: the newest lease for a host is the one injected.
    pub granted_at: UnixTime,
    /// Live or revoked.
    pub state: LeaseState,
    /// How the credential goes in: for an inject rule, also the one place
    /// a placeholder the sandbox put may stand.
    pub delivery: Delivery,
    /// The credential may be sent over plain `http://` (a test server, an
    /// internal host); otherwise it is injected over TLS only.
    pub allow_plain_http: bool,
}

impl LeaseEntry {
    /// Why this lease cannot be used at `now`, if it cannot.
    fn unusable(&self, now: UnixTime) -> Option<Reason> {
        match self.state {
            LeaseState::Live { expires_at } if now < expires_at => None,
            LeaseState::Live { .. } => Some(Reason::LeaseExpired),
            LeaseState::Revoked { run_ended: true } => Some(Reason::RunNotLive),
            LeaseState::Revoked { run_ended: false } => Some(Reason::LeaseRevoked),
        }
    }
}

/// Whether `lease` can be used at `now`, or why not (`lease_expired`,
/// `lease_revoked`, `run_not_live`).
pub fn usable(lease: &LeaseEntry, now: UnixTime) -> Result<(), Reason> {
    lease.unusable(now).map_or(Ok(()), Err)
}

/// The placeholder of a lease id `lease_<32 hex>`: `gatehouse_lease_<32 hex>`;
/// `None` for any other id form (uppercase hex included: ids are minted
/// lowercase, and one lease must have exactly one placeholder).
pub fn placeholder_for(lease_id: &str) -> Option<String> {
    let hex = lease_id.strip_prefix("lease_")?;
    let well_formed = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    well_formed.then(|| format!("gatehouse_lease_{hex}"))
}

/// What the door does with one request of a run that holds leases.
#[derive(Debug, PartialEq, Eq)]
pub struct Examined {
    /// The lease whose credential goes into this request (index into the
    /// slice given), if any.
    pub inject: Option<usize>,
}

/// Why a request of a run that holds leases is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRefusal {
    /// The stable code.
    pub reason: Reason,
    /// The lease concerned, when there is one.
    pub lease_id: Option<String>,
    /// The lease must be revoked at once (a leak attempt).
    pub revoke: bool,
}

impl LeaseRefusal {
    fn new(reason: Reason, lease: Option<&LeaseEntry>, revoke: bool) -> Self {
        Self { reason, lease_id: lease.map(|l| l.lease_id.clone()), revoke }
    }
}

/// Decides what one request of a run gets from the run's `leases`.
///
/// `target_host` and every lease's host must be normalized by the caller as
/// [`crate::target`] normalizes (lowercase ASCII, IDNA, no trailing dot):
/// hosts are compared exactly, so a host spelled differently is another host
/// — which fails closed (no injection; a placeholder toward it is a
/// mismatch), never open.
///
/// The rules, in the order they apply:
///
/// 1. A lease's placeholder *appears* in the request if it is a substring of
///    any header value (as bytes, UTF-8 or not); of the decoded credentials
///    of any header whose value is `Basic <base64>` (scheme matched without
///    regard to case, padding optional; user or password part); or of the
///    path and query, raw or percent-decoded (or form-decoded, `+` as a
///    space). A placeholder split across
///    two headers does not appear: the door never assembles one.
/// 2. The placeholder of a lease for another host appearing anywhere is
///    `lease_host_mismatch` and that lease must be revoked (`revoke`): the
///    run tried to send its credential where it does not belong. This holds
///    even if that lease is already revoked or expired — it is still a leak
///    attempt, and revoking again is harmless.
/// 3. The placeholder of a lease for the target host in the path or query
///    is `lease_placeholder_in_url`: the door never writes a secret into a
///    URL, which upstreams log.
/// 4. The placeholder of a lease for the target host in the headers: it
///    must stand exactly where the lease's rule puts the credential — the
///    whole value of the rule's header with the placeholder for `{secret}`
///    (`Bearer <placeholder>`), or, for a Basic rule, the password of Basic
///    credentials whose user is the rule's user — and nowhere else (another
///    header, text around it, a header name, a second copy):
///    `lease_placeholder_misplaced`. An upstream that echoes a header cut
///    to a window would otherwise hand back a piece of the secret the run
///    chose by padding. The lease is injected if it is also live and
///    unexpired (`now < expires_at`); a dead one says why first:
///    `lease_expired`, `lease_revoked`, or `run_not_live` when it was
///    revoked because its run ended. Placeholders of two different leases for the target host
///    are `credentials_ambiguous` (no lease named: two are concerned):
///    refused, never guessed.
/// 5. No placeholder: the newest (by `granted_at`, then `lease_id`) live,
///    unexpired lease for the target host is injected, through its rule. If
///    the run has leases for the host but none usable, the newest of them
///    says why (`lease_expired`, `lease_revoked`, `run_not_live`): the agent
///    expected a credential, so the request is not sent without one. With
///    no lease for the host at all, nothing is injected.
/// 6. A lease chosen by 4 or 5 goes only over TLS (`over_tls`), unless its
///    credential allows plain HTTP: `lease_plain_http`. The run picks the
///    scheme, so it would otherwise pick the downgrade.
pub fn examine(
    headers: &HeaderMap,
    path_and_query: &str,
    target_host: &str,
    over_tls: bool,
    leases: &[LeaseEntry],
    now: UnixTime,
) -> Result<Examined, LeaseRefusal> {
    let chosen = choose(headers, path_and_query, target_host, leases, now)?;
    if let Some(lease) = chosen.inject.and_then(|i| leases.get(i))
        && !over_tls
        && !lease.allow_plain_http
    {
        return Err(LeaseRefusal::new(Reason::LeasePlainHttp, Some(lease), false));
    }
    Ok(chosen)
}

/// Rules 1 to 5 of [`examine`].
fn choose(
    headers: &HeaderMap,
    path_and_query: &str,
    target_host: &str,
    leases: &[LeaseEntry],
    now: UnixTime,
) -> Result<Examined, LeaseRefusal> {
    let request = Haystacks::of(headers, path_and_query);
    let seen: Vec<Seen> = leases.iter().map(|lease| request.seen(lease.placeholder.as_bytes())).collect();
    let with_seen = || leases.iter().zip(&seen).enumerate();

    if let Some((_, (lease, _))) =
        with_seen().find(|(_, (lease, seen))| lease.host != target_host && (seen.headers || seen.url))
    {
        return Err(LeaseRefusal::new(Reason::LeaseHostMismatch, Some(lease), true));
    }
    if let Some((_, (lease, _))) = with_seen().find(|(_, (_, seen))| seen.url) {
        return Err(LeaseRefusal::new(Reason::LeasePlaceholderInUrl, Some(lease), false));
    }
    let mut placed = with_seen().filter(|(_, (_, seen))| seen.headers);
    match (placed.next(), placed.next()) {
        (Some(_), Some(_)) => return Err(LeaseRefusal::new(Reason::CredentialsAmbiguous, None, false)),
        (Some((i, (lease, _))), None) => {
            // A dead lease says why first: nothing is injected either way.
            return match lease.unusable(now) {
                Some(reason) => Err(LeaseRefusal::new(reason, Some(lease), false)),
                None if !placed_by_the_rule(headers, lease) => {
                    Err(LeaseRefusal::new(Reason::LeasePlaceholderMisplaced, Some(lease), false))
                }
                None => Ok(Examined { inject: Some(i) }),
            };
        }
        (None, _) => {}
    }

    let newest = |usable: bool| {
        leases
            .iter()
            .enumerate()
            .filter(|(_, lease)| lease.host == target_host && lease.unusable(now).is_none() == usable)
            .max_by(|(_, a), (_, b)| (a.granted_at, &a.lease_id).cmp(&(b.granted_at, &b.lease_id)))
    };
    if let Some((i, _)) = newest(true) {
        return Ok(Examined { inject: Some(i) });
    }
    match newest(false) {
        Some((_, lease)) => {
            let reason = lease.unusable(now).unwrap_or(Reason::LeaseUnavailable);
            Err(LeaseRefusal::new(reason, Some(lease), false))
        }
        None => Ok(Examined { inject: None }),
    }
}

/// Whether `lease`'s placeholder stands in `headers` exactly once, exactly
/// where its rule puts the credential (see [`examine`], rule 4).
fn placed_by_the_rule(headers: &HeaderMap, lease: &LeaseEntry) -> bool {
    let placeholder = lease.placeholder.as_bytes();
    let mut places = headers.iter().filter(|(name, value)| {
        find(name.as_str().as_bytes(), placeholder).is_some()
            || find(value.as_bytes(), placeholder).is_some()
            || basic_credentials(value.as_bytes()).is_some_and(|c| find(&c, placeholder).is_some())
    });
    let (Some((name, value)), None) = (places.next(), places.next()) else {
        return false;
    };
    let Delivery::Inject(rule) = &lease.delivery else {
        // A signed request has no place for a placeholder.
        return false;
    };
    match rule {
        InjectRule::Header { name: rule_name, format } => {
            name == rule_name
                && value.as_bytes() == format.replacen(SECRET_MARK, &lease.placeholder, 1).as_bytes()
        }
        InjectRule::Basic { username } => {
            let expected = [username.as_bytes(), b":", placeholder].concat();
            name == header::AUTHORIZATION
                && basic_credentials(value.as_bytes()).is_some_and(|c| c.as_slice() == expected)
        }
    }
}

/// Puts the secret into the request.
///
/// Every occurrence of the lease's placeholder in a header value is replaced
/// by the secret — inside decoded `Basic` credentials too (git's
/// `x-access-token:<placeholder>`), re-encoded — except in the headers only
/// gatehouse sets (framing, hop-by-hop, `Host`, `Expect`, `Proxy-*`): those
/// are refused, stripped or rewritten on the way out, and a secret has no
/// business in any of them, not even for a moment. If the placeholder
/// appears in no other header value, the lease's rule sets its header,
/// replacing whatever
/// the sandbox gave for it (it cannot have meant its own value to go beside
/// the credential). Every header value written is marked sensitive, so
/// HTTP/2 encoders keep it out of compression tables and `Debug` hides it.
///
/// Returns the replacements the answer must be scrubbed of, secret form to
/// placeholder form: always (secret, placeholder); for Basic credentials
/// also the base64 form as sent to the base64 form the sandbox knows.
///
/// Fails — leaving `headers` untouched — with `credential_unreadable` when
/// the secret is empty or cannot be a header value (a control character,
/// say), and with `header_not_allowed` when the rule is not one
/// [`InjectRule::header`] or [`InjectRule::basic`] would accept (the
/// variants' fields are public, so a rule may not have come through them).
pub fn apply(headers: &mut HeaderMap, lease: &LeaseEntry, secret: &[u8]) -> Result<Scrub, Reason> {
    // A signing lease's material is never a header value.
    let Delivery::Inject(rule) = &lease.delivery else {
        return Err(Reason::HeaderNotAllowed);
    };
    if secret.is_empty() {
        return Err(Reason::CredentialUnreadable);
    }
    let placeholder = lease.placeholder.as_bytes();
    let mut scrub = Scrub::default();
    scrub.push(secret, placeholder);

    // Every new value is built before any is written: a failure must not
    // leave a request half rewritten, with a secret in it.
    let mut rewrites: Vec<(&mut HeaderValue, HeaderValue)> = Vec::new();
    if !placeholder.is_empty() {
        for (name, value) in headers.iter_mut() {
            if reserved_header(name) {
                continue;
            }
            let bytes = value.as_bytes();
            if find(bytes, placeholder).is_some() {
                let written = replace_all(bytes, placeholder, secret);
                rewrites.push((value, sensitive(&written)?));
            } else if let Some(decoded) = basic_credentials(bytes)
                && find(&decoded, placeholder).is_some()
            {
                let with_secret = replace_all(&decoded, placeholder, secret);
                let sent = Zeroizing::new(STANDARD.encode(&*with_secret));
                scrub.push(sent.as_bytes(), STANDARD.encode(&*decoded).as_bytes());
                let written = Zeroizing::new(format!("Basic {}", sent.as_str()));
                rewrites.push((value, sensitive(written.as_bytes())?));
            }
        }
    }
    if !rewrites.is_empty() {
        for (slot, value) in rewrites {
            *slot = value;
        }
        return Ok(scrub);
    }

    match rule {
        InjectRule::Header { name, format } => {
            check_header_rule(name, format).map_err(|_| Reason::HeaderNotAllowed)?;
            let (before, after) = format.split_once(SECRET_MARK).ok_or(Reason::HeaderNotAllowed)?;
            let mut written = Zeroizing::new(Vec::with_capacity(format.len() + secret.len()));
            written.extend_from_slice(before.as_bytes());
            written.extend_from_slice(secret);
            written.extend_from_slice(after.as_bytes());
            headers.insert(name.clone(), sensitive(&written)?);
        }
        InjectRule::Basic { username } => {
            check_username(username).map_err(|_| Reason::HeaderNotAllowed)?;
            let mut credentials = Zeroizing::new(Vec::with_capacity(username.len() + 1 + secret.len()));
            credentials.extend_from_slice(username.as_bytes());
            credentials.push(b':');
            credentials.extend_from_slice(secret);
            let sent = Zeroizing::new(STANDARD.encode(&*credentials));
            let known = STANDARD.encode(format!("{username}:{}", lease.placeholder));
            scrub.push(sent.as_bytes(), known.as_bytes());
            let written = Zeroizing::new(format!("Basic {}", sent.as_str()));
            headers.insert(header::AUTHORIZATION, sensitive(written.as_bytes())?);
        }
    }
    Ok(scrub)
}

/// A header value holding a secret.
fn sensitive(bytes: &[u8]) -> Result<HeaderValue, Reason> {
    let mut value = HeaderValue::from_bytes(bytes).map_err(|_| Reason::CredentialUnreadable)?;
    value.set_sensitive(true);
    Ok(value)
}

/// Whether any form of `secret` occurs in the request: in a header value, in
/// decoded `Basic` credentials, or in the path and query — raw,
/// percent-decoded, or form-decoded (`+` as a space). The door uses it to
/// refuse a raw secret, which a run should never have, sent toward another
/// host. An empty secret occurs nowhere.
pub fn carries_secret(headers: &HeaderMap, path_and_query: &str, secret: &[u8]) -> bool {
    let seen = Haystacks::of(headers, path_and_query).seen(secret);
    seen.headers || seen.url
}

/// Where a needle was found.
#[derive(Clone, Copy)]
struct Seen {
    headers: bool,
    url: bool,
}

/// The parts of a request a placeholder or secret is looked for in, decoded
/// once for all the needles.
struct Haystacks<'a> {
    values: Vec<&'a [u8]>,
    basic: Vec<Zeroizing<Vec<u8>>>,
    url: Vec<Cow<'a, [u8]>>,
}

impl<'a> Haystacks<'a> {
    fn of(headers: &'a HeaderMap, path_and_query: &'a str) -> Self {
        let values: Vec<&[u8]> =
            headers.iter().flat_map(|(name, value)| [name.as_str().as_bytes(), value.as_bytes()]).collect();
        let basic = values.iter().filter_map(|v| basic_credentials(v)).collect();
        let raw = path_and_query.as_bytes();
        let mut url = vec![Cow::Borrowed(raw)];
        if raw.contains(&b'%') {
            url.push(Cow::Owned(percent_decode(raw, false)));
        }
        if raw.contains(&b'+') {
            url.push(Cow::Owned(percent_decode(raw, true)));
        }
        Self { values, basic, url }
    }

    /// Where `needle` occurs; an empty needle occurs nowhere.
    fn seen(&self, needle: &[u8]) -> Seen {
        if needle.is_empty() {
            return Seen { headers: false, url: false };
        }
        let headers = self.values.iter().any(|v| find(v, needle).is_some())
            || self.basic.iter().any(|c| find(c, needle).is_some());
        let url = self.url.iter().any(|u| find(u, needle).is_some());
        Seen { headers, url }
    }
}

/// The decoded credentials of a `Basic <base64>` value (scheme in any case,
/// padding optional), if it is one.
fn basic_credentials(value: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    let value = value.trim_ascii();
    let split = value.iter().position(|&b| b == b' ' || b == b'\t')?;
    let (scheme, token) = value.split_at(split);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let token = token.trim_ascii();
    if token.is_empty() {
        return None;
    }
    LENIENT_BASE64.decode(token).ok().map(Zeroizing::new)
}

/// `input` with `%XX` escapes decoded (hex digits in either case; an invalid
/// escape is left as it is) and, for `plus_as_space`, `+` read as a space
/// (HTML form encoding, which many servers apply to queries).
pub(crate) fn percent_decode(input: &[u8], plus_as_space: bool) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while let Some(&b) = input.get(i) {
        let escaped =
            match (b, input.get(i + 1).copied().and_then(hex), input.get(i + 2).copied().and_then(hex)) {
                (b'%', Some(high), Some(low)) => Some(high << 4 | low),
                _ => None,
            };
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(if plus_as_space && b == b'+' { b' ' } else { b });
                i += 1;
            }
        }
    }
    out
}

/// Whether `needle` occurs in `haystack` (an empty needle occurs nowhere).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// The first position of `needle` in `haystack`. A plain window search: the
/// inputs are header-sized and the needles a few dozen bytes; bodies go
/// through [`Scrubber`] instead.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `haystack` with every (non-overlapping, leftmost first) `needle` replaced
/// by `with`.
fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(haystack.len() + with.len()));
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        let (before, after) = rest.split_at(at);
        out.extend_from_slice(before);
        out.extend_from_slice(with);
        rest = after.get(needle.len()..).unwrap_or_default();
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrub::testing::{drain, frames};
    use proptest::prelude::*;

    const NOW: UnixTime = 1_800_000_000;
    const HOST: &str = "api.github.com";
    const OTHER: &str = "evil.example";
    const SECRET: &[u8] = b"ghp_s3cr3t_t0ken_value";

    fn lease(n: u8, host: &str, granted_at: UnixTime, state: LeaseState) -> LeaseEntry {
        let lease_id = format!("lease_{n:032x}");
        LeaseEntry {
            placeholder: placeholder_for(&lease_id).unwrap(),
            lease_id,
            host: host.to_owned(),
            granted_at,
            state,
            delivery: Delivery::Inject(InjectRule::header("authorization", "Bearer {secret}").unwrap()),
            allow_plain_http: false,
        }
    }

    fn live(n: u8, host: &str) -> LeaseEntry {
        lease(n, host, NOW - 100 + i64::from(n), LeaseState::Live { expires_at: NOW + 120 })
    }

    fn expired(n: u8, host: &str) -> LeaseEntry {
        lease(n, host, NOW - 300 + i64::from(n), LeaseState::Live { expires_at: NOW - 1 })
    }

    fn revoked(n: u8, host: &str, run_ended: bool) -> LeaseEntry {
        lease(n, host, NOW - 100 + i64::from(n), LeaseState::Revoked { run_ended })
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn b64(s: impl AsRef<[u8]>) -> String {
        STANDARD.encode(s)
    }

    fn refused(reason: Reason, lease: Option<&LeaseEntry>, revoke: bool) -> Result<Examined, LeaseRefusal> {
        Err(LeaseRefusal { reason, lease_id: lease.map(|l| l.lease_id.clone()), revoke })
    }

    fn inject(i: usize) -> Result<Examined, LeaseRefusal> {
        Ok(Examined { inject: Some(i) })
    }

    fn percent_encode_all(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("%{b:02X}")).collect()
    }

    #[test]
    fn placeholders_are_derived_from_canonical_lease_ids_only() {
        let hex = "0193a5b2c3d4e5f60718293a4b5c6d7e";
        assert_eq!(placeholder_for(&format!("lease_{hex}")), Some(format!("gatehouse_lease_{hex}")));
        for bad in [
            "",
            "lease_",
            hex,
            "lease_0193A5B2C3D4E5F60718293A4B5C6D7E",
            "lease_0193a5b2c3d4e5f60718293a4b5c6d7",
            "lease_0193a5b2c3d4e5f60718293a4b5c6d7e0",
            "lease_0193a5b2c3d4e5f60718293a4b5c6d7g",
            "grant_0193a5b2c3d4e5f60718293a4b5c6d7e",
            "Lease_0193a5b2c3d4e5f60718293a4b5c6d7e",
        ] {
            assert_eq!(placeholder_for(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_rules_may_not_set_what_only_gatehouse_sets() {
        for name in [
            "host",
            "Host",
            "content-length",
            "Transfer-Encoding",
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "upgrade",
            "expect",
            "proxy-authorization",
            "Proxy-Authenticate",
            "proxy-connection",
            "proxy-anything",
        ] {
            assert!(InjectRule::header(name, "Bearer {secret}").is_err(), "{name}");
        }
        for name in crate::http1::HOP_BY_HOP {
            assert!(InjectRule::header(name, "{secret}").is_err(), "{name}");
        }
        for name in ["", "bad name", "bad:name", "bad\nname", "naïve"] {
            assert!(InjectRule::header(name, "{secret}").is_err(), "{name:?}");
        }
        for name in ["authorization", "Authorization", "cookie", "x-api-key", "PRIVATE-TOKEN"] {
            let rule = InjectRule::header(name, "token {secret}").unwrap();
            let InjectRule::Header { name: parsed, format } = rule else { panic!("not a header rule") };
            assert_eq!(parsed.as_str(), name.to_ascii_lowercase());
            assert_eq!(format, "token {secret}");
        }
    }

    #[test]
    fn header_rule_formats_hold_the_secret_once_and_nothing_invisible() {
        for good in ["{secret}", "Bearer {secret}", "token {secret}", "session={secret}; theme=dark"] {
            assert!(InjectRule::header("authorization", good).is_ok(), "{good}");
        }
        let longest = format!("{}{{secret}}", "x".repeat(MAX_FORMAT_BYTES - SECRET_MARK.len()));
        assert!(InjectRule::header("authorization", &longest).is_ok());
        for bad in [
            String::new(),
            "Bearer".to_owned(),
            "Bearer {Secret}".to_owned(),
            "{secret} {secret}".to_owned(),
            "{secret}{secret}".to_owned(),
            "Bearer {secret}\r\nX-Evil: 1".to_owned(),
            "Bearer\t{secret}".to_owned(),
            "Bearer {secret}\u{7f}".to_owned(),
            "Bearér {secret}".to_owned(),
            format!("x{longest}"),
        ] {
            assert!(InjectRule::header("authorization", &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn basic_rules_take_a_plain_user_name() {
        assert_eq!(
            InjectRule::basic("x-access-token"),
            Ok(InjectRule::Basic { username: "x-access-token".to_owned() })
        );
        assert!(InjectRule::basic(&"u".repeat(128)).is_ok());
        for bad in [String::new(), "u".repeat(129), "a:b".into(), "a b".into(), "a\tb".into(), "ü".into()] {
            assert!(InjectRule::basic(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn without_a_placeholder_the_newest_live_lease_for_the_host_is_injected() {
        let mut tie = live(3, HOST);
        tie.granted_at = NOW - 50;
        let mut tie_newer_id = live(4, HOST);
        tie_newer_id.granted_at = NOW - 50;
        let leases = [live(1, HOST), tie_newer_id, tie, live(9, OTHER), expired(8, HOST)];
        assert_eq!(examine(&HeaderMap::new(), "/user", HOST, true, &leases, NOW), inject(1));
        let plain = headers(&[("accept", "application/json")]);
        assert_eq!(examine(&plain, "/user?page=2", HOST, true, &leases[..1], NOW), inject(0));
        // No lease for the host: nothing to inject, nothing refused.
        assert_eq!(examine(&plain, "/", "example.org", true, &leases, NOW), Ok(Examined { inject: None }));
        assert_eq!(examine(&plain, "/", HOST, true, &[], NOW), Ok(Examined { inject: None }));
    }

    #[test]
    fn a_placeholder_is_taken_only_as_the_whole_value_its_rule_writes() {
        let leases = [live(1, HOST), live(2, HOST)];
        let older = &leases[0].placeholder;
        let request = headers(&[("authorization", &format!("Bearer {older}")), ("accept", "*/*")]);
        assert_eq!(examine(&request, "/", HOST, true, &leases, NOW), inject(0));
        let misplaced = refused(Reason::LeasePlaceholderMisplaced, Some(&leases[0]), false);
        // Padding around it, another scheme, another header, a second copy,
        // a cookie, a header name: an echo of any of them could be cut to a
        // window of the secret the run chose.
        for request in [
            headers(&[("authorization", &format!("token {older}"))]),
            headers(&[("authorization", &format!("Bearer {older}x"))]),
            headers(&[("authorization", &format!("Bearer  {older}"))]),
            headers(&[("authorization", &format!("xBearer {older}"))]),
            headers(&[("x-api-key", older)]),
            headers(&[("authorization", &format!("Bearer {older}")), ("x-debug", older)]),
            headers(&[
                ("authorization", &format!("Bearer {older}")),
                ("authorization", &format!("Bearer {older}")),
            ]),
            headers(&[("cookie", &format!("session={older}"))]),
            headers(&[(older.as_str(), "1")]),
            headers(&[("authorization", &format!("Basic {}", b64(format!("x:{older}"))))]),
        ] {
            assert_eq!(examine(&request, "/", HOST, true, &leases, NOW), misplaced, "{request:?}");
        }
        // Header values need not be UTF-8: still misplaced.
        let mut raw = HeaderMap::new();
        raw.insert(
            "authorization",
            HeaderValue::from_bytes(&[b"\xff Bearer ", older.as_bytes()].concat()).unwrap(),
        );
        assert_eq!(examine(&raw, "/", HOST, true, &leases, NOW), misplaced);
        // A rule naming another header takes the placeholder there, whole.
        let mut keyed = leases.clone();
        keyed[0].delivery = Delivery::Inject(InjectRule::header("x-api-key", "{secret}").unwrap());
        let custom = headers(&[("x-api-key", older), ("accept", "*/*")]);
        assert_eq!(examine(&custom, "/", HOST, true, &keyed, NOW), inject(0));
        let cookie_rule = InjectRule::header("cookie", "session={secret}").unwrap();
        keyed[0].delivery = Delivery::Inject(cookie_rule);
        let cookie = headers(&[("cookie", &format!("session={older}"))]);
        assert_eq!(examine(&cookie, "/", HOST, true, &keyed, NOW), inject(0));
        let cookie = headers(&[("cookie", &format!("theme=dark; session={older}"))]);
        assert_eq!(
            examine(&cookie, "/", HOST, true, &keyed, NOW),
            refused(Reason::LeasePlaceholderMisplaced, Some(&keyed[0]), false)
        );
    }

    #[test]
    fn a_placeholder_in_basic_credentials_is_the_password_of_the_rules_user() {
        let mut leases = [live(1, HOST), live(2, HOST)];
        leases[0].delivery = Delivery::Inject(InjectRule::basic("git").unwrap());
        let p = &leases[0].placeholder.clone();
        let padded = b64(format!("git:{p}"));
        let unpadded = padded.trim_end_matches('=').to_owned();
        assert_ne!(padded, unpadded, "the example must need padding");
        for value in [format!("Basic {padded}"), format!("basic {unpadded}"), format!("BASIC   {padded}  ")] {
            let request = headers(&[("authorization", &value)]);
            assert_eq!(examine(&request, "/", HOST, true, &leases, NOW), inject(0), "{value}");
        }
        let misplaced = refused(Reason::LeasePlaceholderMisplaced, Some(&leases[0]), false);
        for value in [
            format!("Basic {}", b64(format!("{p}:x-oauth-basic"))),
            format!("Basic {}", b64(format!("{p}:"))),
            format!("Basic {}", b64(format!("other:{p}"))),
            format!("Basic {}", b64(format!("git:{p}x"))),
            format!("Bearer {p}"),
        ] {
            let request = headers(&[("authorization", &value)]);
            assert_eq!(examine(&request, "/", HOST, true, &leases, NOW), misplaced, "{value}");
        }
        // Basic credentials in another header are found, and misplaced.
        let proxy = headers(&[("proxy-authorization", &format!("Basic {padded}"))]);
        assert_eq!(examine(&proxy, "/", HOST, true, &leases, NOW), misplaced);
    }

    #[test]
    fn a_credential_goes_over_tls_unless_its_credential_allows_plain_http() {
        let mut leases = [live(1, HOST)];
        let placed = headers(&[("authorization", &format!("Bearer {}", leases[0].placeholder))]);
        let plain_http = refused(Reason::LeasePlainHttp, Some(&leases[0]), false);
        assert_eq!(examine(&placed, "/", HOST, false, &leases, NOW), plain_http);
        assert_eq!(examine(&HeaderMap::new(), "/", HOST, false, &leases, NOW), plain_http);
        // Nothing to inject: plain HTTP is the policy's business, not this one's.
        assert_eq!(
            examine(&HeaderMap::new(), "/", OTHER, false, &leases, NOW),
            Ok(Examined { inject: None })
        );
        leases[0].allow_plain_http = true;
        assert_eq!(examine(&placed, "/", HOST, false, &leases, NOW), inject(0));
        assert_eq!(examine(&HeaderMap::new(), "/", HOST, false, &leases, NOW), inject(0));
    }

    #[test]
    fn a_placeholder_in_the_url_is_refused_raw_or_percent_encoded() {
        let leases = [live(1, HOST)];
        let p = &leases[0].placeholder;
        let url = |pq: String| examine(&HeaderMap::new(), &pq, HOST, true, &leases, NOW);
        let in_url = refused(Reason::LeasePlaceholderInUrl, Some(&leases[0]), false);
        assert_eq!(url(format!("/repos?access_token={p}")), in_url);
        assert_eq!(url(format!("/{p}/x")), in_url);
        assert_eq!(url(format!("/?t={}", percent_encode_all(p.as_bytes()))), in_url);
        assert_eq!(url(format!("/?t={}", percent_encode_all(p.as_bytes()).to_lowercase())), in_url);
        let partly = format!("/?t={}{}", &p[..8], percent_encode_all(&p.as_bytes()[8..]));
        assert_eq!(url(partly), in_url);
        // Even when the header carries it too.
        let both = headers(&[("authorization", &format!("Bearer {p}"))]);
        assert_eq!(examine(&both, &format!("/?t={p}"), HOST, true, &leases, NOW), in_url);
        // Invalid escapes are left as they are: nothing found, nothing broken.
        assert_eq!(url("/?q=%zz%4%".to_owned()), inject(0));
    }

    #[test]
    fn a_placeholder_toward_another_host_is_a_leak_attempt_and_revokes() {
        let for_other = [live(1, HOST), live(2, OTHER)];
        let theirs = &for_other[0].placeholder;
        let leak = refused(Reason::LeaseHostMismatch, Some(&for_other[0]), true);
        let bearer = headers(&[("authorization", &format!("Bearer {theirs}"))]);
        assert_eq!(examine(&bearer, "/", OTHER, true, &for_other, NOW), leak);
        let basic =
            headers(&[("authorization", &format!("Basic {}", b64(format!("x-access-token:{theirs}"))))]);
        assert_eq!(examine(&basic, "/", OTHER, true, &for_other, NOW), leak);
        let query = format!("/collect?d={theirs}");
        assert_eq!(examine(&HeaderMap::new(), &query, OTHER, true, &for_other, NOW), leak);
        let encoded = format!("/collect?d={}", percent_encode_all(theirs.as_bytes()));
        assert_eq!(examine(&HeaderMap::new(), &encoded, OTHER, true, &for_other, NOW), leak);
        // A host with no lease at all is another host too.
        assert_eq!(examine(&bearer, "/", "unleased.example", true, &for_other, NOW), leak);
        // Dead leases still count: it is still a leak attempt.
        for dead in [expired(1, HOST), revoked(1, HOST, false), revoked(1, HOST, true)] {
            let leases = [dead];
            let leak = refused(Reason::LeaseHostMismatch, Some(&leases[0]), true);
            assert_eq!(examine(&bearer, "/", OTHER, true, &leases, NOW), leak);
        }
        // Before anything else: even beside the target host's own placeholder.
        let mixed = headers(&[
            ("authorization", &format!("Bearer {}", for_other[1].placeholder)),
            ("x-exfil", theirs),
        ]);
        assert_eq!(examine(&mixed, "/", OTHER, true, &for_other, NOW), leak);
    }

    #[test]
    fn hosts_compare_exactly_and_unnormalized_hosts_fail_closed() {
        let leases = [live(1, HOST)];
        let p = &leases[0].placeholder;
        let bearer = headers(&[("authorization", &format!("Bearer {p}"))]);
        assert_eq!(examine(&bearer, "/", "api.github.com", true, &leases, NOW), inject(0));
        // Normalizing is the caller's job; a host it forgot to normalize is
        // another host, so nothing is injected and a placeholder is a leak.
        for unnormalized in ["API.GitHub.com", "api.github.com."] {
            assert_eq!(
                examine(&HeaderMap::new(), "/", unnormalized, true, &leases, NOW),
                Ok(Examined { inject: None })
            );
            assert_eq!(
                examine(&bearer, "/", unnormalized, true, &leases, NOW),
                refused(Reason::LeaseHostMismatch, Some(&leases[0]), true)
            );
        }
    }

    #[test]
    fn a_placeholder_split_across_headers_is_never_assembled() {
        let leases = [live(1, HOST)];
        let p = leases[0].placeholder.clone();
        let (front, back) = p.split_at(10);
        let mut request = headers(&[("x-a", front), ("x-b", back)]);
        // Not found: the lease is injected through its rule, not the fragments.
        assert_eq!(examine(&request, "/", HOST, true, &leases, NOW), inject(0));
        apply(&mut request, &leases[0], SECRET).unwrap();
        assert_eq!(request["x-a"], front);
        assert_eq!(request["x-b"], back);
        assert_eq!(request[header::AUTHORIZATION].as_bytes(), [b"Bearer ".as_slice(), SECRET].concat());
        // Nor across two values of one header.
        let mut split = headers(&[("x-a", front), ("x-a", back)]);
        assert_eq!(examine(&split, "/", HOST, true, &leases, NOW), inject(0));
        apply(&mut split, &leases[0], SECRET).unwrap();
        let values: Vec<_> = split.get_all("x-a").iter().collect();
        assert_eq!(values, [front, back]);
        // A split placeholder toward another host is not a leak either.
        assert_eq!(examine(&request, "/", OTHER, true, &leases, NOW), Ok(Examined { inject: None }));
    }

    #[test]
    fn a_placed_lease_must_be_live_and_unexpired() {
        let cases = [
            (expired(1, HOST), Reason::LeaseExpired),
            (lease(1, HOST, NOW - 120, LeaseState::Live { expires_at: NOW }), Reason::LeaseExpired),
            (revoked(1, HOST, true), Reason::RunNotLive),
            (revoked(1, HOST, false), Reason::LeaseRevoked),
        ];
        for (dead, reason) in cases {
            // A live lease for the host beside it does not stand in for it.
            let leases = [dead, live(2, HOST)];
            let request = headers(&[("authorization", &format!("Bearer {}", leases[0].placeholder))]);
            assert_eq!(
                examine(&request, "/", HOST, true, &leases, NOW),
                refused(reason, Some(&leases[0]), false)
            );
        }
        let almost = [lease(1, HOST, NOW - 119, LeaseState::Live { expires_at: NOW + 1 })];
        let request = headers(&[("authorization", &format!("Bearer {}", almost[0].placeholder))]);
        assert_eq!(examine(&request, "/", HOST, true, &almost, NOW), inject(0));
    }

    #[test]
    fn placeholders_of_two_leases_are_ambiguous() {
        let leases = [live(1, HOST), live(2, HOST)];
        let request = headers(&[
            ("authorization", &format!("Bearer {}", leases[0].placeholder)),
            ("x-api-key", &leases[1].placeholder),
        ]);
        assert_eq!(
            examine(&request, "/", HOST, true, &leases, NOW),
            refused(Reason::CredentialsAmbiguous, None, false)
        );
        let one_value = headers(&[("x", &format!("{}{}", leases[1].placeholder, leases[0].placeholder))]);
        assert_eq!(
            examine(&one_value, "/", HOST, true, &leases, NOW),
            refused(Reason::CredentialsAmbiguous, None, false)
        );
        // Ambiguity comes before liveness: which one was meant cannot be told.
        let dead = [expired(1, HOST), live(2, HOST)];
        let request = headers(&[("x-a", &dead[0].placeholder), ("x-b", &dead[1].placeholder)]);
        assert_eq!(
            examine(&request, "/", HOST, true, &dead, NOW),
            refused(Reason::CredentialsAmbiguous, None, false)
        );
    }

    #[test]
    fn a_host_whose_leases_are_all_dead_is_refused_not_sent_bare() {
        let plain = HeaderMap::new();
        let one = |dead: LeaseEntry, reason| {
            let leases = [dead, live(5, OTHER)];
            assert_eq!(
                examine(&plain, "/", HOST, true, &leases, NOW),
                refused(reason, Some(&leases[0]), false)
            );
        };
        one(expired(1, HOST), Reason::LeaseExpired);
        one(revoked(1, HOST, false), Reason::LeaseRevoked);
        one(revoked(1, HOST, true), Reason::RunNotLive);
        // The newest of them says why.
        let leases = [expired(1, HOST), revoked(2, HOST, true), expired(3, HOST)];
        assert_eq!(
            examine(&plain, "/", HOST, true, &leases, NOW),
            refused(Reason::RunNotLive, Some(&leases[1]), false)
        );
        // A live one among them is injected.
        let leases = [expired(1, HOST), live(2, HOST), revoked(3, HOST, false)];
        assert_eq!(examine(&plain, "/", HOST, true, &leases, NOW), inject(1));
    }

    #[test]
    fn a_header_rule_replaces_what_the_sandbox_set() {
        let mut entry = live(1, HOST);
        entry.delivery = Delivery::Inject(InjectRule::header("Authorization", "token {secret}").unwrap());
        let mut request = headers(&[
            ("authorization", "Bearer sandbox-made"),
            ("authorization", "Basic Zm9vOmJhcg=="),
            ("accept", "*/*"),
        ]);
        let scrub = apply(&mut request, &entry, SECRET).unwrap();
        let values: Vec<_> = request.get_all(header::AUTHORIZATION).iter().collect();
        assert_eq!(values.len(), 1);
        assert_eq!(values[0].as_bytes(), [b"token ".as_slice(), SECRET].concat());
        assert!(values[0].is_sensitive());
        assert_eq!(request["accept"], "*/*");
        assert_eq!(scrub.pairs().len(), 1);

        let mut cookie = live(2, HOST);
        cookie.delivery = Delivery::Inject(InjectRule::header("cookie", "session={secret}").unwrap());
        let mut request = headers(&[("cookie", "theme=dark")]);
        apply(&mut request, &cookie, SECRET).unwrap();
        assert_eq!(request["cookie"].as_bytes(), [b"session=".as_slice(), SECRET].concat());
    }

    #[test]
    fn a_basic_rule_sends_user_and_secret() {
        let mut entry = live(1, HOST);
        entry.delivery = Delivery::Inject(InjectRule::basic("x-access-token").unwrap());
        let mut request = headers(&[("authorization", "Bearer nope")]);
        let scrub = apply(&mut request, &entry, SECRET).unwrap();
        let value = &request[header::AUTHORIZATION];
        assert!(value.is_sensitive());
        let token = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
        assert_eq!(STANDARD.decode(token).unwrap(), [b"x-access-token:".as_slice(), SECRET].concat());
        let known = b64(format!("x-access-token:{}", entry.placeholder));
        assert_eq!(scrub.pairs().len(), 2);
        assert_eq!(scrub.pairs()[1].0.as_slice(), token.as_bytes());
        assert_eq!(scrub.pairs()[1].1, known.as_bytes());
    }

    #[test]
    fn a_placeholder_in_git_basic_credentials_is_replaced_and_reencoded() {
        let mut entry = live(1, HOST);
        entry.delivery = Delivery::Inject(InjectRule::basic("x-access-token").unwrap());
        let p = &entry.placeholder;
        for sent in [b64(format!("x-access-token:{p}")), b64(format!("x-access-token:{p}")).replace('=', "")]
        {
            let mut request = headers(&[("authorization", &format!("basic {sent}")), ("x-other", "kept")]);
            assert_eq!(
                examine(&request, "/org/repo.git/info/refs", HOST, true, std::slice::from_ref(&entry), NOW),
                inject(0)
            );
            let scrub = apply(&mut request, &entry, SECRET).unwrap();
            let value = &request[header::AUTHORIZATION];
            assert!(value.is_sensitive());
            let token = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
            assert_eq!(STANDARD.decode(token).unwrap(), [b"x-access-token:".as_slice(), SECRET].concat());
            // The rule did not add a second credential.
            assert_eq!(request.get_all(header::AUTHORIZATION).iter().count(), 1);
            assert_eq!(request["x-other"], "kept");
            let known = b64(format!("x-access-token:{p}"));
            let pairs: Vec<(&[u8], &[u8])> =
                scrub.pairs().iter().map(|(s, p)| (s.as_slice(), p.as_slice())).collect();
            assert_eq!(pairs, [(SECRET, p.as_bytes()), (token.as_bytes(), known.as_bytes())]);
        }
    }

    #[test]
    fn every_occurrence_of_the_placeholder_in_headers_is_replaced() {
        let entry = live(1, HOST);
        let p = &entry.placeholder;
        let mut request = headers(&[
            ("x-api-key", p),
            ("x-api-key", &format!("{p}-{p}")),
            ("authorization", &format!("Bearer {p}")),
            ("accept", "*/*"),
        ]);
        apply(&mut request, &entry, SECRET).unwrap();
        let s = String::from_utf8(SECRET.to_vec()).unwrap();
        let keys: Vec<_> =
            request.get_all("x-api-key").iter().map(|v| (v.to_str().unwrap(), v.is_sensitive())).collect();
        assert_eq!(keys, [(s.as_str(), true), (format!("{s}-{s}").as_str(), true)]);
        assert_eq!(request[header::AUTHORIZATION].to_str().unwrap(), format!("Bearer {s}"));
        assert!(!request["accept"].is_sensitive());
    }

    #[test]
    fn the_secret_is_never_written_into_a_header_only_gatehouse_sets() {
        let entry = live(1, HOST);
        let p = &entry.placeholder;
        let basic = format!("Basic {}", b64(format!("grant:{p}")));
        let mut request = headers(&[("host", p), ("proxy-authorization", &basic), ("connection", p)]);
        let original = request.clone();
        // The door refuses such a request; if it were ever applied, none of
        // these headers would take the secret.
        assert_eq!(
            examine(&request, "/", HOST, true, std::slice::from_ref(&entry), NOW),
            refused(Reason::LeasePlaceholderMisplaced, Some(&entry), false)
        );
        apply(&mut request, &entry, SECRET).unwrap();
        for name in ["host", "proxy-authorization", "connection"] {
            assert_eq!(request[name], original[name], "{name}");
        }
        // The credential went where the rule puts it instead.
        assert_eq!(request[header::AUTHORIZATION].as_bytes(), [b"Bearer ".as_slice(), SECRET].concat());
    }

    #[test]
    fn a_secret_that_cannot_be_sent_changes_nothing() {
        let entry = live(1, HOST);
        let p = &entry.placeholder;
        let basic = format!("Basic {}", b64(format!("u:{p}")));
        for secret in [b"".as_slice(), b"line\r\nX-Evil: 1", b"nul\0"] {
            for original in [
                // The Basic value could take the secret, the raw one cannot:
                // neither is written.
                headers(&[("authorization", &basic), ("x-b", p), ("x-c", &format!("Bearer {p}"))]),
                headers(&[("authorization", "Bearer sandbox")]),
            ] {
                let mut request = original.clone();
                assert_eq!(apply(&mut request, &entry, secret).err(), Some(Reason::CredentialUnreadable));
                assert_eq!(request, original);
            }
        }
        let mut request = headers(&[("authorization", &basic)]);
        assert_eq!(apply(&mut request, &entry, b"").err(), Some(Reason::CredentialUnreadable));
        // Inside Basic credentials any byte can be sent: base64 carries it.
        assert!(apply(&mut request, &entry, b"line\r\n").is_ok());
        let token =
            request[header::AUTHORIZATION].to_str().unwrap().strip_prefix("Basic ").unwrap().to_owned();
        assert_eq!(STANDARD.decode(token).unwrap(), b"u:line\r\n");
        // Obs-text bytes are valid in a header value.
        let mut request = HeaderMap::new();
        assert!(apply(&mut request, &entry, b"caf\xc3\xa9").is_ok());
    }

    #[test]
    fn a_rule_that_bypassed_validation_is_not_applied() {
        let mut entry = live(1, HOST);
        for rule in [
            InjectRule::Header { name: header::HOST, format: "{secret}".into() },
            InjectRule::Header { name: header::PROXY_AUTHORIZATION, format: "Basic {secret}".into() },
            InjectRule::Header { name: header::AUTHORIZATION, format: "Bearer".into() },
            InjectRule::Header { name: header::AUTHORIZATION, format: "{secret}\n".into() },
            InjectRule::Basic { username: "a:b".into() },
            InjectRule::Basic { username: String::new() },
        ] {
            entry.delivery = Delivery::Inject(rule);
            let mut request = headers(&[("authorization", "Bearer sandbox")]);
            assert_eq!(
                apply(&mut request, &entry, SECRET).err(),
                Some(Reason::HeaderNotAllowed),
                "{:?}",
                entry.delivery
            );
            assert_eq!(request["authorization"], "Bearer sandbox");
        }
    }

    #[test]
    fn the_scrub_takes_both_forms_out_of_headers_and_body() {
        let mut entry = live(1, HOST);
        entry.delivery = Delivery::Inject(InjectRule::basic("x-access-token").unwrap());
        let scrub = apply(&mut HeaderMap::new(), &entry, SECRET).unwrap();
        let s = std::str::from_utf8(SECRET).unwrap();
        let sent = b64(format!("x-access-token:{s}"));
        let known = b64(format!("x-access-token:{}", entry.placeholder));
        let p = &entry.placeholder;

        let mut answer = headers(&[
            ("x-echo", &format!("token={s}; again={s}")),
            ("www-authenticate", &format!("Basic realm=\"{sent}\"")),
            ("content-type", "text/plain"),
        ]);
        scrub.headers(&mut answer);
        assert_eq!(answer["x-echo"].to_str().unwrap(), format!("token={p}; again={p}"));
        assert_eq!(answer["www-authenticate"].to_str().unwrap(), format!("Basic realm=\"{known}\""));
        assert_eq!(answer["content-type"], "text/plain");

        let body = format!("{{\"token\":\"{s}\",\"auth\":\"Basic {sent}\",\"tail\":\"{s}\"}}");
        let expected = format!("{{\"token\":\"{p}\",\"auth\":\"Basic {known}\",\"tail\":\"{p}\"}}");
        for piece in [1, 2, 3, 7, 64, body.len()] {
            let pieces: Vec<&[u8]> = body.as_bytes().chunks(piece).collect();
            let scrubbed = drain(ScrubBody::new(frames(&pieces, true), &scrub));
            assert_eq!(String::from_utf8(scrubbed).unwrap(), expected, "pieces of {piece}");
        }
    }

    #[test]
    fn nothing_prints_a_secret() {
        let mut entry = live(1, HOST);
        let secret_text = std::str::from_utf8(SECRET).unwrap();
        for rule in [
            InjectRule::basic("x-access-token").unwrap(),
            InjectRule::header("x-api-key", "{secret}").unwrap(),
        ] {
            entry.delivery = Delivery::Inject(rule);
            let mut request = headers(&[("x-a", &entry.placeholder)]);
            let scrub = apply(&mut request, &entry, SECRET).unwrap();
            let mut rule_added = HeaderMap::new();
            let scrub_rule = apply(&mut rule_added, &entry, SECRET).unwrap();
            let mut scrubber = scrub_rule.stream();
            let _ = scrubber.push(&SECRET[..5]);
            let body = ScrubBody::new(frames(&[SECRET], false), &scrub_rule);
            for printed in [
                format!("{scrub:?}"),
                format!("{scrub_rule:?}"),
                format!("{scrubber:?}"),
                format!("{request:?}"),
                format!("{rule_added:?}"),
                format!("{entry:?}"),
                format!("{body:?}"),
            ] {
                assert!(!printed.contains(secret_text), "{printed}");
                assert!(!printed.contains(&b64(format!("x-access-token:{secret_text}"))), "{printed}");
            }
        }
    }

    #[test]
    fn carries_secret_finds_raw_basic_and_url_encoded_forms() {
        let s = std::str::from_utf8(SECRET).unwrap();
        let none = HeaderMap::new();
        assert!(carries_secret(&headers(&[("x-a", &format!("pre{s}post"))]), "/", SECRET));
        assert!(carries_secret(
            &headers(&[("authorization", &format!("Basic {}", b64(format!("u:{s}"))))]),
            "/",
            SECRET
        ));
        assert!(carries_secret(
            &headers(&[("x-b", &format!("basic {}", b64(format!("{s}:x")).replace('=', "")))]),
            "/",
            SECRET
        ));
        assert!(carries_secret(&none, &format!("/?t={s}"), SECRET));
        assert!(carries_secret(&none, &format!("/{}", percent_encode_all(SECRET)), SECRET));
        assert!(carries_secret(&none, "/?q=pass+word", b"pass word"));
        assert!(carries_secret(&none, "/?q=pass%20word", b"pass word"));
        assert!(!carries_secret(&none, "/?q=pass+word", b"pass%20word"));
        assert!(!carries_secret(&headers(&[("x-a", "nothing here")]), "/nothing?here", SECRET));
        assert!(!carries_secret(&headers(&[("x-a", &s[..10]), ("x-b", &s[10..])]), "/", SECRET));
        assert!(!carries_secret(&headers(&[("x-a", "anything")]), "/anything", b""));
    }

    fn fragment() -> impl Strategy<Value = Vec<u8>> {
        let p1 = placeholder_for(&format!("lease_{:032x}", 1)).unwrap();
        let p3 = placeholder_for(&format!("lease_{:032x}", 3)).unwrap();
        let fixed: Vec<Vec<u8>> = vec![
            b"Basic ".to_vec(),
            b"bearer ".to_vec(),
            b"%".to_vec(),
            b":".to_vec(),
            b"=".to_vec(),
            p1.clone().into_bytes(),
            p3.clone().into_bytes(),
            b64(format!("x-access-token:{p1}")).into_bytes(),
            b64(format!("{p3}:")).into_bytes(),
            percent_encode_all(p1.as_bytes()).into_bytes(),
            SECRET.to_vec(),
        ];
        prop_oneof![prop::sample::select(fixed), prop::collection::vec(any::<u8>(), 0..12)]
    }

    fn header_value() -> impl Strategy<Value = HeaderValue> {
        prop::collection::vec(fragment(), 0..5)
            .prop_filter_map("not a header value", |parts| HeaderValue::from_bytes(&parts.concat()).ok())
    }

    fn request_headers() -> impl Strategy<Value = HeaderMap> {
        let names =
            prop::sample::select(vec!["authorization", "proxy-authorization", "x-api-key", "cookie", "x-a"]);
        prop::collection::vec((names, header_value()), 0..6).prop_map(|pairs| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(name, value);
            }
            map
        })
    }

    fn leases() -> impl Strategy<Value = Vec<LeaseEntry>> {
        let mut basic = live(3, HOST);
        basic.delivery = Delivery::Inject(InjectRule::basic("x-access-token").unwrap());
        let all = vec![live(1, HOST), expired(2, HOST), basic, revoked(4, HOST, true), live(5, OTHER)];
        prop::sample::subsequence(all, 0..=5)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn examine_and_apply_never_panic(
            mut request in request_headers(),
            path in prop::collection::vec(fragment(), 0..4),
            leases in leases(),
            target in prop::sample::select(vec![HOST, OTHER, "third.example"]),
            secret in prop_oneof![Just(SECRET.to_vec()), prop::collection::vec(any::<u8>(), 0..24)],
        ) {
            let path = String::from_utf8_lossy(&path.concat()).into_owned();
            let _ = carries_secret(&request, &path, &secret);
            match examine(&request, &path, target, true, &leases, NOW) {
                Ok(Examined { inject: Some(i) }) => {
                    let lease = &leases[i];
                    prop_assert_eq!(lease.host.as_str(), target);
                    prop_assert_eq!(lease.unusable(NOW), None);
                    let before = request.clone();
                    match apply(&mut request, lease, &secret) {
                        Ok(scrub) => {
                            prop_assert!(!scrub.is_empty());
                            let mut answer = request.clone();
                            scrub.headers(&mut answer);
                            let _ = drain(ScrubBody::new(frames(&[&secret, b"tail"], true), &scrub));
                        }
                        Err(_) => prop_assert_eq!(request, before),
                    }
                }
                Ok(Examined { inject: None }) => {}
                Err(refusal) => {
                    prop_assert_eq!(refusal.revoke, refusal.reason == Reason::LeaseHostMismatch);
                }
            }
        }
    }
}
