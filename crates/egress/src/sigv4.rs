//! AWS Signature Version 4 at the door: a run's request to a host its
//! `aws_sigv4` lease signs for leaves signed with the stored keys, whatever
//! the run's SDK signed it with (dummy keys, so it works unchanged).
//!
//! The run's own signature and everything that would stand beside ours is
//! removed first (`Authorization`, `X-Amz-Date`, `X-Amz-Security-Token`,
//! `X-Amz-Content-Sha256`). Two things the door cannot sign for the run are
//! refused, never passed on: a presigned query string, version 4's or
//! version 2's (the run would be signing, with keys it does not hold) and a chunk-signed streaming body
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: each chunk carries a signature
//! only the signer can make). A body in hand is hashed into the signature;
//! a streamed one is `UNSIGNED-PAYLOAD` (S3 over TLS accepts it; the TLS
//! connection protects the body), and an `aws-chunked` body with an
//! unsigned trailer keeps its `STREAMING-UNSIGNED-PAYLOAD-TRAILER`, which
//! says how the body is framed and signs none of it.
//!
//! The signature itself is [`gatehouse_capability::sigv4`]'s; this module
//! is the request's side: which headers, which payload hash, which host.

use std::borrow::Cow;

use gatehouse_capability::sigv4::{self, Signer};
use gatehouse_core::{Reason, UnixTime};
use http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::inject::Scrub;

/// The query parameters of a presigned request (matched without case):
/// Signature Version 4's, and version 2's (`AWSAccessKeyId`, `Signature`),
/// which boto3 still presigns S3 URLs with by default.
const PRESIGNED_PARAMETERS: [&str; 6] = [
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-algorithm",
    "x-amz-security-token",
    "awsaccesskeyid",
    "signature",
];
/// `X-Amz-Content-Sha256` values whose chunks the sender signs.
const CHUNK_SIGNED_PREFIXES: [&str; 2] = ["STREAMING-AWS4-HMAC-SHA256", "STREAMING-AWS4-ECDSA"];
/// An `aws-chunked` body with an unsigned trailer: framing, not a signature.
const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
const X_AMZ_DATE: &str = "x-amz-date";
const X_AMZ_CONTENT_SHA256: &str = "x-amz-content-sha256";
const X_AMZ_SECURITY_TOKEN: &str = "x-amz-security-token";
/// The same names, parsed once.
static DATE_HEADER: HeaderName = HeaderName::from_static(X_AMZ_DATE);
static CONTENT_SHA256_HEADER: HeaderName = HeaderName::from_static(X_AMZ_CONTENT_SHA256);
static SECURITY_TOKEN_HEADER: HeaderName = HeaderName::from_static(X_AMZ_SECURITY_TOKEN);

/// What the door knows of the request's body when it signs.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// The whole body (the fetch API's, or a small one the proxy read).
    InHand(&'a [u8]),
    /// A body still streaming from the run.
    Streamed,
}

/// The request as it will be sent.
#[derive(Debug)]
pub struct ToSign<'a> {
    /// Its method.
    pub method: &'a str,
    /// The `Host` header it is sent with (`host[:port]`): every door writes
    /// it itself, after the leases apply, from the target it checked, so it
    /// is not written here.
    pub authority: &'a str,
    /// Its path and query.
    pub path_and_query: &'a str,
    /// Its body.
    pub payload: Payload<'a>,
}

/// Why the door will not sign this request, if it will not: a presigned
/// query string (`sigv4_presigned_url`) or a chunk-signed body
/// (`sigv4_streaming_signed`). Checked before anything is changed.
pub fn refused(headers: &HeaderMap, path_and_query: &str) -> Option<Reason> {
    let query = path_and_query.split_once('?').map_or("", |(_, q)| q);
    let presigned = query.split('&').any(|pair| {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        let is_presigning =
            |name: &[u8]| PRESIGNED_PARAMETERS.iter().any(|p| name.eq_ignore_ascii_case(p.as_bytes()));
        match name.contains('%') {
            true => is_presigning(&crate::inject::percent_decode(name.as_bytes(), false)),
            false => is_presigning(name.as_bytes()),
        }
    });
    if presigned {
        return Some(Reason::Sigv4PresignedUrl);
    }
    let chunk_signed = headers.get_all(&CONTENT_SHA256_HEADER).iter().any(|v| {
        let v = v.as_bytes();
        CHUNK_SIGNED_PREFIXES
            .iter()
            .any(|p| v.len() >= p.len() && v[..p.len()].eq_ignore_ascii_case(p.as_bytes()))
    });
    chunk_signed.then_some(Reason::Sigv4StreamingSigned)
}

/// Signs `headers` for `request` with `signer` at `now`. Returns what the
/// answer is scrubbed of: the session token, to `placeholder` (the access
/// key id is an identifier AWS itself shows, and the secret key never
/// leaves).
///
/// Fails — leaving `headers` untouched — with [`refused`]'s reasons, with
/// `header_not_allowed` for a header the signature would cover that is not
/// visible ASCII, and with `credential_unreadable` if a value cannot be a
/// header.
pub fn sign(
    headers: &mut HeaderMap,
    request: &ToSign<'_>,
    signer: &Signer,
    placeholder: &str,
    now: UnixTime,
) -> Result<Scrub, Reason> {
    if let Some(reason) = refused(headers, request.path_and_query) {
        return Err(reason);
    }
    let keeps_trailer = headers
        .get(&CONTENT_SHA256_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(UNSIGNED_TRAILER.as_bytes()));
    let payload_hash = match (keeps_trailer, request.payload) {
        (true, _) => UNSIGNED_TRAILER.to_owned(),
        (false, Payload::InHand([])) => sigv4::EMPTY_PAYLOAD_SHA256.to_owned(),
        (false, Payload::InHand(body)) => sigv4::payload_hash(body),
        (false, Payload::Streamed) => sigv4::UNSIGNED_PAYLOAD.to_owned(),
    };
    let date = sigv4::amz_date(now);
    let token = signer.keys().session_token().map(sensitive).transpose()?;
    let date_value = HeaderValue::from_str(&date).map_err(|_| Reason::CredentialUnreadable)?;
    let hash_value = HeaderValue::from_str(&payload_hash).map_err(|_| Reason::CredentialUnreadable)?;

    // What the signature covers, as it will be sent: the run's own headers
    // it covers (checked before anything changes), and the door's.
    let mut covered: Vec<(&str, Cow<'_, str>)> = Vec::with_capacity(8);
    for name in headers.keys() {
        let n = name.as_str();
        let replaced =
            n == "host" || n == X_AMZ_DATE || n == X_AMZ_SECURITY_TOKEN || n == X_AMZ_CONTENT_SHA256;
        if replaced || !covers(n) {
            continue;
        }
        let mut values = headers.get_all(name).iter().map(HeaderValue::to_str);
        let first = values.next().transpose().map_err(|_| Reason::HeaderNotAllowed)?.unwrap_or_default();
        let mut joined = Cow::Borrowed(first);
        for more in values {
            let joined = joined.to_mut();
            joined.push(',');
            joined.push_str(more.map_err(|_| Reason::HeaderNotAllowed)?);
        }
        covered.push((n, joined));
    }
    covered.push(("host", Cow::Borrowed(request.authority)));
    covered.push((X_AMZ_DATE, Cow::Borrowed(&date)));
    covered.push((X_AMZ_CONTENT_SHA256, Cow::Borrowed(&payload_hash)));
    if let Some(token) = signer.keys().session_token() {
        covered.push((X_AMZ_SECURITY_TOKEN, Cow::Borrowed(token)));
    }
    let pairs: Vec<(&str, &str)> = covered.iter().map(|(n, v)| (*n, v.as_ref())).collect();
    let (path, query) = request.path_and_query.split_once('?').unwrap_or((request.path_and_query, ""));
    let to_sign =
        sigv4::Request { method: request.method, path, query, headers: &pairs, payload_hash: &payload_hash };
    let authorization = sensitive(&signer.authorization(&to_sign, now))?;

    // Nothing below can fail: the request changes whole or not at all.
    headers.remove(header::AUTHORIZATION);
    headers.insert(DATE_HEADER.clone(), date_value);
    headers.insert(CONTENT_SHA256_HEADER.clone(), hash_value);
    match token {
        Some(token) => {
            headers.insert(SECURITY_TOKEN_HEADER.clone(), token);
        }
        None => {
            headers.remove(&SECURITY_TOKEN_HEADER);
        }
    }
    headers.insert(header::AUTHORIZATION, authorization);

    let mut scrub = Scrub::default();
    if let Some(token) = signer.keys().session_token() {
        scrub.push(token.as_bytes(), placeholder.as_bytes());
    }
    Ok(scrub)
}

/// Whether the signature covers a header: `host`, every `x-amz-*`, and
/// the body's `content-type` and `content-md5`.
fn covers(name: &str) -> bool {
    name == "host" || name == "content-type" || name == "content-md5" || name.starts_with("x-amz-")
}

fn sensitive(text: &str) -> Result<HeaderValue, Reason> {
    let mut value = HeaderValue::from_str(text).map_err(|_| Reason::CredentialUnreadable)?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use gatehouse_capability::sigv4::{AwsKeys, Scope};

    use super::*;

    const NOW: UnixTime = 1_369_353_600;

    fn signer(token: Option<&str>) -> Signer {
        let keys =
            AwsKeys::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", token).unwrap();
        Signer::new(keys, Scope::new("us-east-1", "s3").unwrap())
    }

    fn request<'a>(path_and_query: &'a str, payload: Payload<'a>) -> ToSign<'a> {
        ToSign { method: "GET", authority: "examplebucket.s3.amazonaws.com", path_and_query, payload }
    }

    fn sdk_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static(
            "AWS4-HMAC-SHA256 Credential=AKIADUMMYDUMMYDUMMY0/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"));
        h.insert("x-amz-date", HeaderValue::from_static("20000101T000000Z"));
        h.insert("x-amz-security-token", HeaderValue::from_static("dummy-token"));
        h.insert("x-amz-content-sha256", HeaderValue::from_static("UNSIGNED-PAYLOAD"));
        h.insert("range", HeaderValue::from_static("bytes=0-9"));
        h.insert("user-agent", HeaderValue::from_static("aws-cli/2"));
        h
    }

    #[test]
    fn the_runs_signature_is_replaced_by_the_doors() {
        let mut headers = sdk_headers();
        let scrub =
            sign(&mut headers, &request("/test.txt", Payload::InHand(b"")), &signer(None), "p", NOW).unwrap();
        assert!(scrub.is_empty(), "without a session token nothing secret goes out");
        assert_eq!(headers["x-amz-date"], "20130524T000000Z");
        assert_eq!(headers["x-amz-content-sha256"], sigv4::EMPTY_PAYLOAD_SHA256);
        assert!(headers.get("x-amz-security-token").is_none(), "the run's token is gone");
        assert!(headers.get("host").is_none(), "the door writes Host itself");
        let authorization = headers["authorization"].to_str().unwrap();
        assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"));
        // `range` is not covered (the published example's signature covers
        // it, so ours differs from it by that alone); user-agent never is.
        assert!(
            authorization.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date,"),
            "{authorization}"
        );
        assert!(headers["authorization"].is_sensitive());
    }

    #[test]
    fn a_session_token_goes_in_signed_and_the_answer_is_scrubbed_of_it() {
        let mut headers = HeaderMap::new();
        let scrub =
            sign(&mut headers, &request("/", Payload::Streamed), &signer(Some("FwoGZXIv+token")), "p", NOW)
                .unwrap();
        assert_eq!(headers["x-amz-security-token"], "FwoGZXIv+token");
        assert!(headers["x-amz-security-token"].is_sensitive());
        assert_eq!(headers["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
        assert!(headers["authorization"].to_str().unwrap().contains("x-amz-security-token"));
        let mut answer = HeaderMap::new();
        answer.insert("x-echo", HeaderValue::from_static("FwoGZXIv+token AKIAIOSFODNN7EXAMPLE"));
        scrub.headers(&mut answer);
        assert_eq!(answer["x-echo"], "p AKIAIOSFODNN7EXAMPLE", "the id is AWS's to show; the token is not");
    }

    #[test]
    fn presigned_urls_and_chunk_signed_bodies_are_refused_untouched() {
        for url in [
            "/o?X-Amz-Signature=abc",
            "/o?a=1&x-amz-credential=AKIA%2F",
            "/o?X%2DAmz%2DAlgorithm=AWS4-HMAC-SHA256",
            "/o?X-Amz-Security-Token",
            "/runs/k?AWSAccessKeyId=AKIADUMMY&Signature=N9X%2FZm8%3D&Expires=1796511529",
        ] {
            let mut headers = sdk_headers();
            let before = headers.clone();
            let got = sign(&mut headers, &request(url, Payload::Streamed), &signer(None), "p", NOW);
            assert_eq!(got.err(), Some(Reason::Sigv4PresignedUrl), "{url}");
            assert_eq!(headers, before);
        }
        let mut headers = sdk_headers();
        headers
            .insert("x-amz-content-sha256", HeaderValue::from_static("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"));
        let got = sign(&mut headers, &request("/o", Payload::Streamed), &signer(None), "p", NOW);
        assert_eq!(got.err(), Some(Reason::Sigv4StreamingSigned));
        // A query merely mentioning the words is not presigned.
        let mut headers = HeaderMap::new();
        assert!(
            sign(
                &mut headers,
                &request("/o?prefix=x-amz-signature", Payload::Streamed),
                &signer(None),
                "p",
                NOW
            )
            .is_ok()
        );
    }

    #[test]
    fn an_unsigned_trailer_body_keeps_its_framing() {
        let mut headers = HeaderMap::new();
        headers
            .insert("x-amz-content-sha256", HeaderValue::from_static("STREAMING-UNSIGNED-PAYLOAD-TRAILER"));
        headers.insert("x-amz-trailer", HeaderValue::from_static("x-amz-checksum-crc32"));
        sign(&mut headers, &request("/o", Payload::InHand(b"5\r\nhello\r\n0\r\n")), &signer(None), "p", NOW)
            .unwrap();
        assert_eq!(headers["x-amz-content-sha256"], UNSIGNED_TRAILER);
        assert!(headers["authorization"].to_str().unwrap().contains("x-amz-trailer"));
    }
}
