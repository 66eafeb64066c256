//! AWS Signature Version 4, as the door signs a run's request with a stored
//! `aws_sigv4` credential: the run holds dummy keys, the door holds these.
//!
//! Written from AWS's specification ("Create a signed AWS API request"):
//! the canonical request, the string to sign, the derived signing key and
//! the `Authorization` header. Only the header form is made; a presigned
//! query string is never produced (and the door refuses a run's own).
//!
//! The keys arrive once, at the worker, and are sealed like any secret
//! ([`AwsKeys::to_material`]); the gateway opens the material for the one
//! request it signs. The secret access key never leaves this module: what
//! goes out is an HMAC under a key derived from it for one day, region and
//! service.

use std::fmt;

use gatehouse_core::{CivilTime, UnixTime};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::credential::{CredentialError, CredentialSecret};

/// The algorithm's name, in the string to sign and the header.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The payload hash of a body that is not hashed (S3 over TLS).
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// The SHA-256 of no bytes: the payload hash of a request without a body.
pub const EMPTY_PAYLOAD_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// An AWS access key: its id, its secret, and a session token for
/// temporary credentials. Never printed; the secret parts are wiped.
pub struct AwsKeys {
    access_key_id: String,
    secret_access_key: Zeroizing<String>,
    session_token: Option<Zeroizing<String>>,
}

/// The sealed material's JSON shape, written from borrowed keys.
#[derive(Serialize)]
struct MaterialOut<'a> {
    access_key_id: &'a str,
    secret_access_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_token: Option<&'a str>,
}

/// The sealed material's JSON shape, read; its strings move into
/// [`Zeroizing`] at once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaterialIn {
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    session_token: Option<String>,
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AwsKeys(redacted)")
    }
}

/// Why keys given to gatehouse are refused (the message is the caller's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AwsKeysError {
    /// The access key id is not 16-128 characters of A-Z and 0-9.
    #[error("access_key_id is 16-128 characters of A-Z and 0-9")]
    AccessKeyId,
    /// The secret access key is empty, too long or not visible ASCII.
    #[error("secret_access_key is 1-256 visible ASCII characters")]
    SecretAccessKey,
    /// The session token is empty, too long or not visible ASCII.
    #[error("session_token is 1-2048 visible ASCII characters")]
    SessionToken,
}

fn visible_ascii(text: &str, max: usize) -> bool {
    !text.is_empty() && text.len() <= max && text.bytes().all(|b| b.is_ascii_graphic())
}

impl AwsKeys {
    /// Keys as a caller gives them, checked: they go into a signature and
    /// (the session token) a header, so only visible ASCII.
    pub fn new(
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
    ) -> Result<Self, AwsKeysError> {
        let id_ok = (16..=128).contains(&access_key_id.len())
            && access_key_id.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
        if !id_ok {
            return Err(AwsKeysError::AccessKeyId);
        }
        if !visible_ascii(secret_access_key, 256) {
            return Err(AwsKeysError::SecretAccessKey);
        }
        if session_token.is_some_and(|t| !visible_ascii(t, 2048)) {
            return Err(AwsKeysError::SessionToken);
        }
        Ok(Self {
            access_key_id: access_key_id.to_owned(),
            secret_access_key: Zeroizing::new(secret_access_key.to_owned()),
            session_token: session_token.map(|t| Zeroizing::new(t.to_owned())),
        })
    }

    /// The keys as one secret to seal (JSON text, no control characters).
    pub fn to_material(&self) -> Result<CredentialSecret, CredentialError> {
        let out = MaterialOut {
            access_key_id: &self.access_key_id,
            secret_access_key: &self.secret_access_key,
            session_token: self.session_token(),
        };
        let text = Zeroizing::new(serde_json::to_string(&out).map_err(|_| CredentialError::SecretInvalid)?);
        CredentialSecret::new(&text)
    }

    /// The keys out of an opened secret; anything else is
    /// `credential_secret_invalid`, and is checked like keys given.
    pub fn from_material(material: &CredentialSecret) -> Result<Self, CredentialError> {
        let keys: MaterialIn =
            serde_json::from_slice(material.expose()).map_err(|_| CredentialError::SecretInvalid)?;
        let secret = Zeroizing::new(keys.secret_access_key);
        let token = keys.session_token.map(Zeroizing::new);
        Self::new(&keys.access_key_id, &secret, token.as_deref().map(String::as_str))
            .map_err(|_| CredentialError::SecretInvalid)
    }

    /// The access key id (sent in every signature's credential scope).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The session token, sent as `X-Amz-Security-Token` (a secret: the
    /// caller marks the header sensitive and scrubs answers of it).
    pub fn session_token(&self) -> Option<&str> {
        self.session_token.as_deref().map(String::as_str)
    }

    /// The secret access key: what a request toward another host must
    /// never carry (the door looks for it), never sent itself.
    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }
}

/// Where a signature is valid: one region and one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `us-east-1`, ...
    pub region: String,
    /// `s3`, `sts`, `execute-api`, ...
    pub service: String,
}

impl Scope {
    /// A region and a service as a caller gives them: 1-64 characters of
    /// lowercase letters, digits and `-` (they go into the credential
    /// scope, which `/` separates).
    pub fn new(region: &str, service: &str) -> Result<Self, &'static str> {
        let name = |s: &str| {
            (1..=64).contains(&s.len())
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        if !name(region) {
            return Err("region is 1-64 characters of a-z, 0-9 and -");
        }
        if !name(service) {
            return Err("service is 1-64 characters of a-z, 0-9 and -");
        }
        Ok(Self { region: region.to_owned(), service: service.to_owned() })
    }
}

/// The request as it will be sent: what the signature covers.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method, as sent (`GET`).
    pub method: &'a str,
    /// The path as sent on the wire (already percent-encoded), `/` when empty.
    pub path: &'a str,
    /// The query as sent, without `?`; empty when none.
    pub query: &'a str,
    /// The headers to sign, names in any case; `host` and `x-amz-date`
    /// among them. Each name once (a repeated header's values joined by the
    /// caller with `,`).
    pub headers: &'a [(&'a str, &'a str)],
    /// The hex SHA-256 of the body, or [`UNSIGNED_PAYLOAD`].
    pub payload_hash: &'a str,
}

/// `YYYYMMDDTHHMMSSZ` for `now` (UTC): the `X-Amz-Date` header's value.
pub fn amz_date(now: UnixTime) -> String {
    let t = CivilTime::of(now);
    let mut out = String::with_capacity(16);
    for (value, width) in [(t.year, 4), (t.month, 2), (t.day, 2)] {
        push_digits(&mut out, value, width);
    }
    out.push('T');
    for value in [t.hour, t.minute, t.second] {
        push_digits(&mut out, value, 2);
    }
    out.push('Z');
    out
}

/// `value`'s last `width` (at most 4) decimal digits, zero-padded.
fn push_digits(out: &mut String, value: i64, width: usize) {
    let mut digits = [b'0'; 4];
    let mut rest = value.rem_euclid(10_000);
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
    }
    for &digit in &digits[4 - width.min(4)..] {
        out.push(char::from(digit));
    }
}

/// Lowercase hex of `bytes`, appended to `out`.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// Percent-encodes `bytes` as SigV4 does: the unreserved characters
/// (`A-Z a-z 0-9 - _ . ~`) as they are, everything else `%XX` in
/// uppercase hex; `/` kept when `keep_slash`.
fn uri_encode(bytes: &[u8], keep_slash: bool, out: &mut String) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// Percent-decodes `text`; a `%` not followed by two hex digits stays as it is.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// RFC 3986 §5.2.4, on a path that begins with `/`.
fn remove_dot_segments(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." if last => kept.push(""),
            "." => {}
            ".." => {
                kept.pop();
                if last {
                    kept.push("");
                }
            }
            s => kept.push(s),
        }
    }
    format!("/{}", kept.join("/"))
}

/// The canonical URI: S3's path is signed as sent; every other service's
/// is normalized and encoded once more (AWS: "each path segment URI-encoded
/// twice, except for Amazon S3").
fn canonical_uri<'a>(service: &str, path: &'a str) -> std::borrow::Cow<'a, str> {
    let path = if path.is_empty() { "/" } else { path };
    if service == "s3" {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    uri_encode(remove_dot_segments(path).as_bytes(), true, &mut out);
    std::borrow::Cow::Owned(out)
}

/// Whether `part` is already encoded the one way: unreserved characters
/// and `%XX` escapes in uppercase hex (what the SDKs send).
fn encoded_canonically(part: &str) -> bool {
    let bytes = part.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b));
                if !(hex(bytes.get(i + 1)) && hex(bytes.get(i + 2))) {
                    return false;
                }
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') => i += 1,
            _ => return false,
        }
    }
    true
}

/// The canonical query: each name and value decoded and encoded the one
/// way, sorted by name then value. A query already in that form is its
/// own canonical form.
fn canonical_query(query: &str) -> std::borrow::Cow<'_, str> {
    if query.is_empty() {
        return std::borrow::Cow::Borrowed("");
    }
    let mut previous: Option<(&str, &str)> = None;
    let canonical = query.split('&').all(|pair| {
        let Some((name, value)) = pair.split_once('=') else { return false };
        let in_order = previous.is_none_or(|p| p <= (name, value));
        previous = Some((name, value));
        in_order && encoded_canonically(name) && encoded_canonically(value)
    });
    if canonical {
        return std::borrow::Cow::Borrowed(query);
    }
    std::borrow::Cow::Owned(canonical_query_rebuilt(query))
}

/// [`canonical_query`] the long way.
fn canonical_query_rebuilt(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (mut n, mut v) = (String::new(), String::new());
            uri_encode(&percent_decode(name), false, &mut n);
            uri_encode(&percent_decode(value), false, &mut v);
            (n, v)
        })
        .collect();
    pairs.sort();
    let joined: Vec<String> = pairs.into_iter().map(|(n, v)| format!("{n}={v}")).collect();
    joined.join("&")
}

/// A header value as signed: trimmed, inner runs of whitespace one space.
/// Borrowed when it already is (the usual case).
fn canonical_value(value: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = value.trim_matches(|c: char| c.is_ascii_whitespace());
    let mut after_space = false;
    let collapsed = trimmed.bytes().all(|b| {
        let ok = match b {
            b' ' => !after_space,
            b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => false,
            _ => true,
        };
        after_space = b == b' ';
        ok
    });
    if collapsed {
        return std::borrow::Cow::Borrowed(trimmed);
    }
    std::borrow::Cow::Owned(trimmed.split_ascii_whitespace().collect::<Vec<_>>().join(" "))
}

/// HMAC-SHA256 (aws-lc-rs: the tree's provider, with the CPU's SHA
/// extensions where it has them).
fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let tag = aws_lc_rs::hmac::sign(&aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key), data);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

fn sha256(data: &[u8]) -> aws_lc_rs::digest::Digest {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
}

/// Signs requests with one key for one region and service. The key
/// derived for a day (four HMACs) is kept for that day, as AWS's SDKs
/// keep it: what stays in memory is scoped to the day, region and service,
/// and wiped when replaced or dropped.
pub struct Signer {
    keys: AwsKeys,
    scope: Scope,
    /// The date (`YYYYMMDD`) and the signing key derived for it.
    derived: std::sync::Mutex<Option<([u8; 8], std::sync::Arc<aws_lc_rs::hmac::Key>)>>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("scope", &self.scope).finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer with `keys` for `scope`.
    pub fn new(keys: AwsKeys, scope: Scope) -> Self {
        Self { keys, scope, derived: std::sync::Mutex::new(None) }
    }

    /// Its keys.
    pub fn keys(&self) -> &AwsKeys {
        &self.keys
    }

    /// Its region and service.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The signing key for `date` (`YYYYMMDD`), derived once a day.
    fn signing_key(&self, date: &[u8; 8]) -> std::sync::Arc<aws_lc_rs::hmac::Key> {
        let mut derived = self.derived.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((day, key)) = derived.as_ref()
            && day == date
        {
            return key.clone();
        }
        let secret = Zeroizing::new(format!("AWS4{}", self.keys.secret_access_key.as_str()));
        let k_date = Zeroizing::new(hmac(secret.as_bytes(), date));
        let k_region = Zeroizing::new(hmac(&*k_date, self.scope.region.as_bytes()));
        let k_service = Zeroizing::new(hmac(&*k_region, self.scope.service.as_bytes()));
        let k_signing = Zeroizing::new(hmac(&*k_service, b"aws4_request"));
        // Kept as HMAC's own key: its pads are computed once a day too.
        let key = std::sync::Arc::new(aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &*k_signing));
        *derived = Some((*date, key.clone()));
        key
    }

    /// The `Authorization` header's value for `request`, signed at `now`.
    /// `request.headers` must hold `x-amz-date` with [`amz_date`]`(now)`
    /// and `host`, as they are sent.
    pub fn authorization(&self, request: &Request<'_>, now: UnixTime) -> String {
        let mut headers: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> = request
            .headers
            .iter()
            .map(|(n, v)| {
                let name = match n.bytes().any(|b| b.is_ascii_uppercase()) {
                    true => std::borrow::Cow::Owned(n.to_ascii_lowercase()),
                    false => std::borrow::Cow::Borrowed(*n),
                };
                (name, canonical_value(v))
            })
            .collect();
        headers.sort_unstable();
        let mut signed_headers = String::with_capacity(headers.iter().map(|(n, _)| n.len() + 1).sum());
        for (i, (name, _)) in headers.iter().enumerate() {
            if i > 0 {
                signed_headers.push(';');
            }
            signed_headers.push_str(name);
        }
        let mut canonical = String::with_capacity(320 + request.path.len() + request.query.len());
        canonical.push_str(request.method);
        canonical.push('\n');
        canonical.push_str(&canonical_uri(&self.scope.service, request.path));
        canonical.push('\n');
        canonical.push_str(&canonical_query(request.query));
        canonical.push('\n');
        for (name, value) in &headers {
            canonical.push_str(name);
            canonical.push(':');
            canonical.push_str(value);
            canonical.push('\n');
        }
        canonical.push('\n');
        canonical.push_str(&signed_headers);
        canonical.push('\n');
        canonical.push_str(request.payload_hash);

        let date_time = amz_date(now);
        let mut date = [0u8; 8];
        date.copy_from_slice(&date_time.as_bytes()[..8]);
        let date_text = &date_time[..8];
        let mut string_to_sign = String::with_capacity(160);
        for part in [ALGORITHM, "\n", &date_time, "\n", date_text, "/", &self.scope.region, "/"] {
            string_to_sign.push_str(part);
        }
        string_to_sign.push_str(&self.scope.service);
        string_to_sign.push_str("/aws4_request\n");
        push_hex(&mut string_to_sign, sha256(canonical.as_bytes()).as_ref());
        let signature = aws_lc_rs::hmac::sign(&self.signing_key(&date), string_to_sign.as_bytes());
        let mut header = String::with_capacity(200 + signed_headers.len());
        header.push_str(ALGORITHM);
        header.push_str(" Credential=");
        header.push_str(&self.keys.access_key_id);
        header.push('/');
        // The credential scope, as written into the string to sign.
        let scope_start = ALGORITHM.len() + 1 + date_time.len() + 1;
        header.push_str(&string_to_sign[scope_start..string_to_sign.len() - 65]);
        header.push_str(", SignedHeaders=");
        header.push_str(&signed_headers);
        header.push_str(", Signature=");
        push_hex(&mut header, signature.as_ref());
        header
    }
}

/// The hex SHA-256 of a body: its payload hash.
pub fn payload_hash(body: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    push_hex(&mut out, sha256(body).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's own example keys (the SigV4 test suite's). Its 11-character id
    /// is shorter than IAM's ids, which the API holds keys to.
    fn example_keys() -> AwsKeys {
        AwsKeys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Zeroizing::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into()),
            session_token: None,
        }
    }

    /// 2015-08-30T12:36:00Z, the test suite's time.
    const SUITE_TIME: UnixTime = 1_440_938_160;

    fn suite(path: &str, query: &str) -> String {
        let scope = Scope::new("us-east-1", "service").unwrap();
        let headers = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")];
        let request =
            Request { method: "GET", path, query, headers: &headers, payload_hash: EMPTY_PAYLOAD_SHA256 };
        Signer::new(example_keys(), scope).authorization(&request, SUITE_TIME)
    }

    #[test]
    fn the_aws_test_suites_vanilla_requests_sign_as_published() {
        assert_eq!(amz_date(SUITE_TIME), "20150830T123600Z");
        assert_eq!(
            suite("/", ""),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        // get-vanilla-query-order-key-case: parameters sorted by name.
        assert!(
            suite("/", "Param2=value2&Param1=value1")
                .ends_with("Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        );
    }

    #[test]
    fn the_s3_get_object_example_signs_as_published() {
        // "Signature Calculations for the Authorization Header", GET Object.
        let keys =
            AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None).unwrap();
        let scope = Scope::new("us-east-1", "s3").unwrap();
        let headers = [
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ];
        let request = Request {
            method: "GET",
            path: "/test.txt",
            query: "",
            headers: &headers,
            payload_hash: EMPTY_PAYLOAD_SHA256,
        };
        let signed = Signer::new(keys, scope).authorization(&request, 1_369_353_600);
        assert_eq!(
            signed,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn paths_and_queries_are_made_canonical_by_the_specification() {
        assert_eq!(canonical_uri("s3", "/a%20b/../c"), "/a%20b/../c", "S3 signs the path as sent");
        assert_eq!(canonical_uri("s3", ""), "/");
        assert_eq!(canonical_uri("sts", "/a%20b/./c/../d"), "/a%2520b/d", "normalized, encoded again");
        assert_eq!(canonical_uri("sts", "/a/.."), "/");
        assert_eq!(canonical_query("b=2&a=%7e&a=1&c"), "a=1&a=~&b=2&c=");
        assert_eq!(canonical_query("k=a b+c"), "k=a%20b%2Bc");
        assert_eq!(canonical_query("x=%zz"), "x=%25zz", "a broken escape is a literal %");
        assert_eq!(canonical_value("  a   b \t c "), "a b c");
    }

    #[test]
    fn a_signer_kept_across_days_signs_as_a_fresh_one_each_day() {
        let kept = Signer::new(example_keys(), Scope::new("us-east-1", "service").unwrap());
        for now in [SUITE_TIME, SUITE_TIME + 60, SUITE_TIME + 86_400, SUITE_TIME] {
            let date = amz_date(now);
            let headers = [("host", "example.amazonaws.com"), ("x-amz-date", date.as_str())];
            let request = Request {
                method: "GET",
                path: "/",
                query: "",
                headers: &headers,
                payload_hash: EMPTY_PAYLOAD_SHA256,
            };
            let fresh = Signer::new(example_keys(), Scope::new("us-east-1", "service").unwrap());
            assert_eq!(kept.authorization(&request, now), fresh.authorization(&request, now), "at {date}");
        }
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(amz_date(4_102_444_799), "20991231T235959Z");
        assert_eq!(amz_date(-1), "19691231T235959Z");
    }

    #[test]
    fn keys_are_checked_sealed_as_json_and_never_printed() {
        assert_eq!(AwsKeys::new("short", "s", None).unwrap_err(), AwsKeysError::AccessKeyId);
        assert_eq!(
            AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "", None).unwrap_err(),
            AwsKeysError::SecretAccessKey
        );
        assert_eq!(
            AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "s", Some("a\nb")).unwrap_err(),
            AwsKeysError::SessionToken
        );
        let keys = AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "topsecret/key", Some("tok+en=")).unwrap();
        assert_eq!(format!("{keys:?}"), "AwsKeys(redacted)");
        let material = keys.to_material().unwrap();
        let back = AwsKeys::from_material(&material).unwrap();
        assert_eq!((back.access_key_id(), back.session_token()), ("AKIAIOSFODNN7EXAMPLE", Some("tok+en=")));
        let not_keys = CredentialSecret::new("{\"access_key_id\": \"x\"}").unwrap();
        assert!(AwsKeys::from_material(&not_keys).is_err());
    }
}
