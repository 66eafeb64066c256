//! The fetch client: gatehouse's own outbound requests on a run's behalf
//! (`POST /v1/egress/fetch`) and, later, its calls to OSV and webhooks.
//!
//! Each hop is decided and dialled exactly like a proxied request — policy,
//! one resolution, the address guard, a pinned connection — then TLS (rustls
//! with the aws-lc-rs provider; the system's roots plus any the operator
//! adds) for `https`. Redirects are followed only to the same origin, at most
//! [`MAX_REDIRECTS`], each hop re-checked; webhook deliveries follow none.
//! Bodies are capped both ways and every hop has a timeout.

use std::sync::Arc;

use bytes::Bytes;
use gatehouse_core::Reason;
use http::Response;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Either, Full, Limited, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

use crate::connect::connect_pinned;
use crate::decision::{MAX_REDIRECTS, Purpose, decide_target_resolving};
use crate::http1::{Limits, caller_headers_are_allowed};
use crate::leases::LastCheck;
use crate::meter::{EgressMeter, EgressRefused};
use crate::policy::{Policy, PolicyError};
use crate::resolve::Resolver;
use crate::special::AddressGuard;
use crate::target::{Host, Scheme, Target, parse_url};

/// One request to make.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// The method.
    pub method: Method,
    /// The absolute URL.
    pub url: String,
    /// Headers to send (hop-by-hop ones are dropped).
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// Ordinary request or webhook delivery.
    pub purpose: Purpose,
    /// What the answer must be scrubbed of: the secrets injected into this
    /// request (see [`crate::scrub`]); empty for most requests.
    pub scrub: crate::scrub::Scrub,
    /// Asked right before each hop goes out, after its name is resolved
    /// and decided: a request carrying a secret checks its lease is still
    /// usable then, however long resolving took.
    pub last_check: Option<LastCheck>,
}

/// The final response.
#[derive(Debug, Clone)]
pub struct FetchResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body (within the cap).
    pub body: Bytes,
    /// Redirects followed.
    pub redirects: u8,
}

/// Why a fetch did not happen or did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRefusal {
    /// The reason code.
    pub reason: Reason,
    /// The rule that fired, when one did.
    pub rule: Option<String>,
    /// A deny rule's reason for the agent, when one fired.
    pub rule_reason: Option<String>,
    /// The host concerned (never the full URL).
    pub host: Option<String>,
    /// The rule the refused hop asks a person for, when one could lift it.
    pub asked: Option<crate::policy::proposal::ProposedRule>,
}

impl FetchRefusal {
    fn new(reason: Reason, host: Option<&Host>) -> Self {
        Self { reason, rule: None, rule_reason: None, host: host.map(ToString::to_string), asked: None }
    }
}

/// One hop of a fetch: where, why, and what is sent.
struct Hop<'a> {
    target: &'a Target,
    purpose: Purpose,
    method: &'a Method,
    headers: &'a HeaderMap,
    last_check: Option<&'a LastCheck>,
}

/// Makes requests through the door.
#[derive(Clone)]
pub struct Fetcher {
    guard: AddressGuard,
    resolver: Resolver,
    limits: Limits,
    tls: tokio_rustls::TlsConnector,
    /// The time rules' expiry is judged by.
    clock: Arc<dyn gatehouse_core::Clock>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").field("resolver", &self.resolver).finish_non_exhaustive()
    }
}

impl Fetcher {
    /// A fetcher with this guard, resolver, limits and TLS configuration.
    pub fn new(guard: AddressGuard, resolver: Resolver, limits: Limits, tls: rustls::ClientConfig) -> Self {
        Self {
            guard,
            resolver,
            limits,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            clock: Arc::new(gatehouse_core::SystemClock),
        }
    }

    /// The same fetcher judging rules' expiry by `clock` (the node's).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn gatehouse_core::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Makes `req` under `policy`, following same-origin redirects.
    pub async fn fetch(
        &self,
        policy: Result<&Policy, &PolicyError>,
        req: FetchRequest,
    ) -> Result<FetchResponse, FetchRefusal> {
        self.fetch_for_run(policy, req, None, &mut Vec::new()).await
    }

    /// As [`Fetcher::fetch`], for a run: every body byte, both ways, is paid
    /// from its grant through `meter` before it moves, and what a dry-run
    /// policy would have refused, hop by hop, is added to `would_refuse` for
    /// the caller to record. The answer comes back whole, decoded, capped.
    pub async fn fetch_for_run(
        &self,
        policy: Result<&Policy, &PolicyError>,
        req: FetchRequest,
        meter: Option<&EgressMeter>,
        would_refuse: &mut Vec<FetchRefusal>,
    ) -> Result<FetchResponse, FetchRefusal> {
        if req.body.len() > self.limits.request_bytes {
            return Err(FetchRefusal::new(Reason::RequestTooLarge, None));
        }
        let body = RequestBody::Full(req.body.clone());
        let (response, redirects, host) = self.follow(policy, &req, body, meter, would_refuse).await?;
        let fail = |reason| FetchRefusal::new(reason, Some(&host));
        let (mut parts, body) = response.into_parts();
        passed_on(&mut parts, &req.scrub).map_err(fail)?;
        let collect = async {
            let wire = self.limits.response_bytes;
            match meter {
                Some(meter) => Limited::new(meter.clone().metered(body, |_| {}), wire).collect().await,
                None => Limited::new(body, wire).collect().await,
            }
        };
        let body = tokio::time::timeout(self.limits.response_timeout, collect)
            .await
            .map_err(|_| fail(Reason::UpstreamTimeout))?
            .map_err(|e| fail(body_error_reason(e.as_ref())))?
            .to_bytes();
        // The caller gets the bytes the body stands for, held to the cap.
        let body =
            crate::decode::decode_body(&mut parts.headers, body, self.limits.response_bytes).map_err(fail)?;
        let body = if req.scrub.is_empty() { body } else { req.scrub.body(&body) };
        Ok(FetchResponse { status: parts.status, headers: parts.headers, body, redirects })
    }

    /// As [`Fetcher::fetch_for_run`], with the request body and the answer
    /// streamed, so memory stays one chunk whatever their size: the request
    /// body (cut off at the request cap) and the answer (at the response
    /// cap, on the wire and decoded) are paid frame by frame, and the whole
    /// exchange has the request deadline. A streamed body cannot be sent
    /// twice, so a `307`/`308` asking to repeat it is answered as it came.
    pub async fn fetch_streamed(
        &self,
        policy: Result<&Policy, &PolicyError>,
        req: FetchRequest,
        body: StreamBody,
        meter: &EgressMeter,
        would_refuse: &mut Vec<FetchRefusal>,
    ) -> Result<StreamedResponse, FetchRefusal> {
        let deadline = tokio::time::Instant::now() + self.limits.request_duration;
        let body = meter.clone().metered(Limited::new(body, self.limits.request_bytes), |_| {});
        let body = RequestBody::Stream(Some(body.boxed_unsync()));
        let (response, redirects, host) = self.follow(policy, &req, body, Some(meter), would_refuse).await?;
        let (mut parts, body) = response.into_parts();
        let fail = |reason| FetchRefusal::new(reason, Some(&host));
        passed_on(&mut parts, &req.scrub).map_err(fail)?;
        let body = Limited::new(meter.clone().metered(body, |_| {}), self.limits.response_bytes);
        let body = crate::decode::decode_stream(&mut parts.headers, body, self.limits.response_bytes)
            .map_err(fail)?;
        let body = Deadline { inner: body, deadline: Box::pin(tokio::time::sleep_until(deadline)) };
        let body = if req.scrub.is_empty() {
            body.boxed_unsync()
        } else {
            crate::scrub::ScrubBody::new(body, &req.scrub).boxed_unsync()
        };
        Ok(StreamedResponse { status: parts.status, headers: parts.headers, body, redirects })
    }

    /// Sends `req` hop by hop until an answer that is not a redirect to
    /// follow; returns it (its body unread), the redirects followed and the
    /// host that answered.
    async fn follow(
        &self,
        policy: Result<&Policy, &PolicyError>,
        req: &FetchRequest,
        mut body: RequestBody,
        meter: Option<&EgressMeter>,
        would_refuse: &mut Vec<FetchRefusal>,
    ) -> Result<(Response<Incoming>, u8, Host), FetchRefusal> {
        caller_headers_are_allowed(&req.headers).map_err(|r| FetchRefusal::new(r, None))?;
        let mut target = parse_url(&req.url).map_err(|r| FetchRefusal::new(r, None))?;
        let origin = target.origin();
        let mut method = req.method.clone();
        let mut headers = req.headers.clone();
        for redirects in 0..=MAX_REDIRECTS {
            let hop = Hop {
                target: &target,
                purpose: req.purpose,
                method: &method,
                headers: &headers,
                last_check: req.last_check.as_ref(),
            };
            let Some(hop_body) =
                body.for_hop(meter).await.map_err(|r| FetchRefusal::new(r, Some(&target.host)))?
            else {
                // Nothing left to send again: not a hop gatehouse can make.
                return Err(FetchRefusal::new(Reason::RedirectLimit, Some(&target.host)));
            };
            let response = self.one_hop(policy, hop, hop_body, would_refuse).await?;
            let location = response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok());
            let status = response.status();
            let repeats_body = matches!(status.as_u16(), 307 | 308) && body.is_spent();
            let follow = req.purpose == Purpose::Request
                && status.is_redirection()
                && location.is_some()
                && !repeats_body;
            if !follow {
                return Ok((response, redirects, target.host));
            }
            if redirects == MAX_REDIRECTS {
                return Err(FetchRefusal::new(Reason::RedirectLimit, Some(&target.host)));
            }
            let next = resolve_location(&target, location.unwrap_or_default())
                .map_err(|r| FetchRefusal::new(r, Some(&target.host)))?;
            if next.origin() != origin {
                return Err(FetchRefusal::new(Reason::RedirectCrossOrigin, Some(&next.host)));
            }
            // 301/302/303 continue as GET without a body, as user agents do;
            // 307/308 repeat the request.
            if matches!(status.as_u16(), 301..=303) && method != Method::HEAD {
                method = Method::GET;
                body = RequestBody::Full(Bytes::new());
                headers.remove(header::CONTENT_TYPE);
            }
            target = next;
        }
        Err(FetchRefusal::new(Reason::RedirectLimit, Some(&target.host)))
    }

    async fn one_hop(
        &self,
        policy: Result<&Policy, &PolicyError>,
        Hop { target, purpose, method, headers, last_check }: Hop<'_>,
        body: HopBody,
        would_refuse: &mut Vec<FetchRefusal>,
    ) -> Result<Response<Incoming>, FetchRefusal> {
        let resolver = &self.resolver;
        let now = self.clock.now();
        let decision =
            decide_target_resolving(target.clone(), policy, &self.guard, purpose, now, async |name: &str| {
                resolver.resolve(name).await
            })
            .await
            .with_request(policy, method, now);
        if !decision.allowed() {
            let reason = decision.refusal().unwrap_or(Reason::UpstreamUnreachable);
            return Err(FetchRefusal {
                reason,
                rule: decision.rule.clone(),
                rule_reason: decision.rule_reason.clone(),
                host: decision.host.clone(),
                asked: crate::policy::proposal::ProposedRule::for_refused(target, method, reason),
            });
        }
        if let Some(dry) = &decision.dry_run_would_refuse {
            would_refuse.push(FetchRefusal {
                reason: dry.reason,
                rule: dry.rule.clone(),
                rule_reason: None,
                host: decision.host.clone(),
                asked: None,
            });
        }
        let fail = |reason| FetchRefusal::new(reason, Some(&target.host));
        if let Some(check) = last_check {
            check.check().await.map_err(fail)?;
        }
        let stream =
            connect_pinned(&decision, &self.guard, self.limits.connect_timeout).await.map_err(fail)?;

        let mut request = Request::builder().method(method.clone()).uri(target.path_and_query.as_str());
        if let Some(h) = request.headers_mut() {
            h.extend(headers.clone());
            if let Ok(v) = HeaderValue::from_str(&target.authority()) {
                h.insert(header::HOST, v);
            }
        }
        let request = request.body(body).map_err(|_| fail(Reason::UrlMalformed))?;
        let exchange = async {
            match target.scheme {
                Scheme::Http => exchange(TokioIo::new(stream), request).await,
                Scheme::Https => {
                    let name = match &target.host {
                        Host::Name(n) => ServerName::try_from(n.clone()).map_err(|_| Reason::TlsFailed)?,
                        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
                    };
                    let tls = self.tls.connect(name, stream).await.map_err(|_| Reason::TlsFailed)?;
                    exchange(TokioIo::new(tls), request).await
                }
            }
        };
        tokio::time::timeout(self.limits.response_timeout, exchange)
            .await
            .map_err(|_| fail(Reason::UpstreamTimeout))?
            .map_err(fail)
    }
}

/// A caller's request body, as the fetch client streams it.
pub type StreamBody = UnsyncBoxBody<Bytes, BoxError>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Any request body, boxed for [`Fetcher::fetch_streamed`].
pub fn stream_body<B>(body: B) -> StreamBody
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// What one hop sends.
type HopBody = Either<Full<Bytes>, StreamBody>;

/// A request body across hops: bytes in hand can be sent again, a stream
/// only once.
enum RequestBody {
    Full(Bytes),
    Stream(Option<StreamBody>),
}

impl RequestBody {
    /// The body for the next hop (bytes in hand are paid for here, each time
    /// they are sent), or `None` once a stream has gone.
    async fn for_hop(&mut self, meter: Option<&EgressMeter>) -> Result<Option<HopBody>, Reason> {
        match self {
            RequestBody::Full(bytes) => {
                if let Some(meter) = meter {
                    meter.pay(bytes.len() as u64).await?;
                }
                Ok(Some(Either::Left(Full::new(bytes.clone()))))
            }
            RequestBody::Stream(stream) => Ok(stream.take().map(Either::Right)),
        }
    }

    fn is_spent(&self) -> bool {
        matches!(self, RequestBody::Stream(None))
    }
}

/// An answer whose body is still on its way.
pub struct StreamedResponse {
    /// Status code.
    pub status: StatusCode,
    /// Headers (hop-by-hop and length removed; decoded bodies lose their
    /// `Content-Encoding`).
    pub headers: HeaderMap,
    /// The body, decoded and capped; ends in an error where it was cut off.
    pub body: UnsyncBoxBody<Bytes, BoxError>,
    /// Redirects followed.
    pub redirects: u8,
}

/// One request on a new connection; the answer's head, its body unread.
async fn exchange<IO>(io: IO, request: Request<HopBody>) -> Result<Response<Incoming>, Reason>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, HopBody>(io)
        .await
        .map_err(|_| Reason::UpstreamUnreachable)?;
    tokio::spawn(connection);
    let response =
        sender.send_request(request).await.map_err(|e| match crate::leases::refused_in_body(&e) {
            // The caller's body was refused midway (a placeholder in it).
            Some(reason) => reason,
            None if e.is_parse() => Reason::UpstreamBadResponse,
            None => Reason::UpstreamUnreachable,
        })?;
    crate::http1::framing_is_sound(response.headers())?;
    Ok(response)
}

/// The final answer's head as the caller gets it: scrubbed of `scrub`'s
/// secrets (its codings read before the hop-by-hop headers go), without
/// hop-by-hop headers, and without a length, which would describe the
/// upstream's framing, not what the caller receives.
fn passed_on(head: &mut http::response::Parts, scrub: &crate::scrub::Scrub) -> Result<(), Reason> {
    scrub.answer(head)?;
    crate::http1::strip_hop_by_hop(&mut head.headers);
    head.headers.remove(header::CONTENT_LENGTH);
    Ok(())
}

/// Why a body stopped: over the cap, unpaid, or the upstream's failure.
fn body_error_reason(e: &(dyn std::error::Error + 'static)) -> Reason {
    if e.is::<http_body_util::LengthLimitError>() {
        Reason::ResponseTooLarge
    } else if let Some(refused) = e.downcast_ref::<EgressRefused>() {
        refused.0
    } else {
        Reason::UpstreamUnreachable
    }
}

/// A body that ends in an error at `deadline`: an upstream that trickles
/// cannot hold a streamed fetch open.
struct Deadline<B> {
    inner: B,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

/// The error a body cut off at its deadline ends with.
#[derive(Debug, thiserror::Error)]
#[error("upstream_timeout: the body did not arrive before the request deadline")]
struct BodyDeadline;

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Some(Err(Box::new(BodyDeadline))));
        }
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// The absolute target a `Location` names, read as an RFC 3986 §4.1 URI
/// reference and resolved against `base` (§5.2):
/// - a reference with a scheme is absolute: `http`/`https` go through the
///   strict URL parser, any other (`mailto:`, `javascript:`, `foo:`) is
///   `scheme_not_allowed`;
/// - `//authority...` keeps the base's scheme and names its own host;
/// - anything else is a path, query or fragment reference on the base's
///   origin, its dot segments removed (§5.2.4).
///
/// A backslash anywhere is refused (`url_forbidden_character`): browsers
/// read `\\host` and `/\host` as a host (WHATWG) and RFC 3986 as a path, so
/// whichever the door chose, a client behind it could be made to disagree.
/// So are spaces and control characters, which no URI reference contains
/// (a WHATWG parser would silently drop some of them). The fragment is never
/// sent.
fn resolve_location(base: &Target, location: &str) -> Result<Target, Reason> {
    if location.bytes().any(|b| b == b'\\' || b <= b' ' || b == 0x7f) {
        return Err(Reason::UrlForbiddenCharacter);
    }
    if let Some(scheme) = uri_scheme(location) {
        return match scheme.to_ascii_lowercase().as_str() {
            "http" | "https" => parse_url(location),
            _ => Err(Reason::SchemeNotAllowed),
        };
    }
    if location.starts_with("//") {
        return parse_url(&format!("{}:{location}", base.scheme.as_str()));
    }
    // A relative reference: RFC 3986 §5.2 on the base's path. (The url
    // crate's join implements it; backslashes, the one place where its
    // WHATWG reading differs for http(s), were refused above.)
    let base_url = url::Url::parse(&base.url()).map_err(|_| Reason::UrlMalformed)?;
    let joined = base_url.join(location).map_err(|_| Reason::UrlMalformed)?;
    let path_and_query = match joined.query() {
        Some(q) => format!("{}?{q}", joined.path()),
        None => joined.path().to_owned(),
    };
    parse_url(&format!("{}{}", base.origin(), path_and_query))
}

/// The scheme of a URI reference that has one (RFC 3986 §3.1: a letter,
/// then letters, digits, `+`, `-` or `.`, up to the first `:` that comes
/// before any `/`, `?` or `#`).
fn uri_scheme(reference: &str) -> Option<&str> {
    let end = reference.find([':', '/', '?', '#'])?;
    let scheme = &reference[..end];
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (reference[end..].starts_with(':') && starts_with_letter && rest_ok).then_some(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_base() {
        let base = parse_url("https://api.example/v1/a/b?x=1").unwrap();
        assert_eq!(resolve_location(&base, "/c").unwrap().url(), "https://api.example/c");
        assert_eq!(resolve_location(&base, "c?y=2").unwrap().url(), "https://api.example/v1/a/c?y=2");
        assert_eq!(resolve_location(&base, "../d").unwrap().url(), "https://api.example/v1/d");
        assert_eq!(resolve_location(&base, "//other.example/x").unwrap().url(), "https://other.example/x");
        assert_eq!(resolve_location(&base, "http://api.example/x").unwrap().origin(), "http://api.example");
        assert_eq!(resolve_location(&base, "http://0x7f.1/").unwrap_err(), Reason::HostNoncanonicalIp);
        assert_eq!(resolve_location(&base, "?q").unwrap().url(), "https://api.example/v1/a/b?q");
        assert_eq!(resolve_location(&base, "#frag").unwrap().url(), "https://api.example/v1/a/b?x=1");
        assert_eq!(resolve_location(&base, "HTTPS://api.example/y").unwrap().url(), "https://api.example/y");
    }

    #[test]
    fn a_same_origin_query_may_hold_a_url() {
        let base = parse_url("https://api.example/login").unwrap();
        let next = resolve_location(&base, "/cb?next=https://api.example/home").unwrap();
        assert_eq!(next.url(), "https://api.example/cb?next=https://api.example/home");
        let next = resolve_location(&base, "done?r=a://b").unwrap();
        assert_eq!(next.origin(), "https://api.example");
    }

    #[test]
    fn a_reference_with_another_scheme_is_not_a_path() {
        let base = parse_url("https://api.example/v1/").unwrap();
        for location in [
            "foo:/admin",
            "mailto:/x",
            "javascript:/x",
            "javascript:alert(1)",
            "file:///etc/passwd",
            "ftp://api.example/",
        ] {
            assert_eq!(
                resolve_location(&base, location).unwrap_err(),
                Reason::SchemeNotAllowed,
                "{location}"
            );
        }
        // A colon after the first slash is a path, as RFC 3986 §4.2 says.
        assert_eq!(resolve_location(&base, "./foo:bar").unwrap().url(), "https://api.example/v1/foo:bar");
        assert_eq!(resolve_location(&base, "/a:b").unwrap().url(), "https://api.example/a:b");
    }

    #[test]
    fn backslashes_and_control_characters_are_refused() {
        let base = parse_url("https://api.example/v1/").unwrap();
        for location in [
            "\\\\evil.example/x",
            "/\\evil.example/x",
            "/a\\b",
            "https://api.example\\@evil.example/",
            "/a b",
            "/a\tb",
            "\t/x",
        ] {
            assert_eq!(
                resolve_location(&base, location).unwrap_err(),
                Reason::UrlForbiddenCharacter,
                "{location:?}"
            );
        }
    }
}
