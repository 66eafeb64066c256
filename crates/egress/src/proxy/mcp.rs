//! MCP at the proxy: a run's request to one of its tenant's declared MCP
//! servers (plain HTTP, or inside a terminated tunnel) read by
//! [`crate::mcp_door`] before it goes on, and the server's answer narrowed
//! on its way back: JSON whole, SSE event by event as it streams.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use gatehouse_capability::GrantClaims;
use gatehouse_core::{Reason, RefusalKind};
use gatehouse_mcp::{SseFilter, filter_json};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Body, Frame, Incoming};
use serde_json::Value;

use super::refusal::Refused;
use super::{Proxy, ProxyBody};
use crate::mcp_door::{MAX_MESSAGE_BYTES, McpRequest, is_media, read_request};
use crate::policy::mcp::McpDeclared;

/// What the proxy does with a run's request to a declared server.
pub(super) enum McpOutcome {
    /// Gatehouse answers alone (every message was refused).
    Answer(Response<ProxyBody>),
    /// Send `body` on; the answer gets `errors` added.
    Forward {
        /// The body to send.
        body: Bytes,
        /// The refused requests' JSON-RPC errors.
        errors: Vec<Value>,
    },
}

fn refused(status: StatusCode, reason: Reason, host: Option<String>, server: &str) -> Refused {
    Refused {
        host,
        rule: Some(server.to_owned()),
        ..Refused::new(status, RefusalKind::EgressRefused, reason)
    }
}

/// A response of gatehouse's own: the refused calls' errors as JSON (or a
/// bare `202 Accepted` when only notifications were refused).
fn own_answer(errors: &[Value], batch: bool) -> Response<ProxyBody> {
    let (status, headers, body) = crate::mcp_door::own_answer(errors, batch);
    let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

impl Proxy {
    /// Reads the run's request (its body, whole, up to the MCP cap),
    /// judges and pays its calls, records the refused ones.
    #[allow(clippy::too_many_arguments, reason = "the request's parts as the exchange holds them")]
    pub(super) async fn mcp_request(
        &self,
        declared: &McpDeclared,
        method: &Method,
        headers: &HeaderMap,
        body: Incoming,
        grant: &GrantClaims,
        host: Option<String>,
        placeholders: &[String],
    ) -> Result<McpOutcome, Refused> {
        let invalid =
            || refused(StatusCode::FORBIDDEN, Reason::McpMessageInvalid, host.clone(), &declared.name);
        let bytes = Limited::new(body, MAX_MESSAGE_BYTES).collect().await.map_err(|_| invalid())?.to_bytes();
        // A run's placeholder has no place in an MCP message: it would
        // reach the server as it is, or, worse, be echoed back.
        if placeholders.iter().any(|p| crate::inject::contains(&bytes, p.as_bytes())) {
            let refusal = crate::inject::LeaseRefusal {
                reason: Reason::LeasePlaceholderMisplaced,
                lease_id: None,
                revoke: false,
            };
            return Err(Refused::lease(refusal, host));
        }
        let read = read_request(
            method,
            headers,
            &bytes,
            declared,
            &self.ledger,
            &grant.grant_id,
            self.ledger_required,
            self.clock.now(),
        )
        .await;
        let read = read.map_err(|_| invalid())?;
        let outcome =
            read.record(self.sink.as_ref(), &declared.name, |kind, reason, rule| gatehouse_core::Refusal {
                request_id: Some(gatehouse_core::new_id("req")),
                ..self.record(Some(grant), kind, reason, host.clone(), Some(rule))
            });
        Ok(match outcome {
            McpRequest::Answer { errors, batch } => McpOutcome::Answer(own_answer(&errors, batch)),
            McpRequest::Forward { body, errors } => {
                McpOutcome::Forward { body: body.unwrap_or(bytes), errors }
            }
        })
    }

    /// The server's answer, narrowed, with the refused calls' errors. An
    /// SSE answer that cannot be read (an event past the cap, a list
    /// written twice) is cut where it broke, and the cut recorded.
    pub(super) async fn mcp_answer(
        &self,
        mut parts: http::response::Parts,
        body: ProxyBody,
        declared: &McpDeclared,
        errors: Vec<Value>,
        (grant, host): (&GrantClaims, Option<String>),
    ) -> Result<Response<ProxyBody>, Refused> {
        let bad =
            || refused(StatusCode::BAD_GATEWAY, Reason::McpMessageInvalid, host.clone(), &declared.name);
        if is_media(&parts.headers, "application/json") {
            let whole = body.collect().await.map_err(|_| bad())?.to_bytes();
            let narrowed = filter_json(&whole, &declared.tools, &errors).map_err(|_| bad())?;
            parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(narrowed.len()));
            let body = Full::new(Bytes::from(narrowed)).map_err(|never| match never {}).boxed_unsync();
            Ok(Response::from_parts(parts, body))
        } else if is_media(&parts.headers, "text/event-stream") {
            parts.headers.remove(header::CONTENT_LENGTH);
            let filter = SseFilter::new(declared.tools.clone(), &errors);
            let (sink, refusal) = (
                self.sink.clone(),
                self.record(
                    Some(grant),
                    RefusalKind::EgressRefused,
                    Reason::McpMessageInvalid,
                    host,
                    Some(declared.name.clone()),
                ),
            );
            let on_cut: OnCut = Box::new(move || {
                sink.refused(gatehouse_core::Refusal {
                    request_id: Some(gatehouse_core::new_id("req")),
                    ..refusal
                })
            });
            let narrowed = NarrowedStream { inner: body, filter: Some(filter), on_cut: Some(on_cut) };
            Ok(Response::from_parts(parts, narrowed.boxed_unsync()))
        } else if !errors.is_empty() {
            // Neither (a bare 202): the errors are the answer.
            Ok(own_answer(&errors, true))
        } else {
            Ok(Response::from_parts(parts, body))
        }
    }
}

/// Records a cut stream.
type OnCut = Box<dyn FnOnce() + Send>;

/// An SSE answer narrowed event by event as it streams.
struct NarrowedStream {
    inner: ProxyBody,
    /// `None` once the stream ended.
    filter: Option<SseFilter>,
    /// Called once if the stream is cut for what it carried.
    on_cut: Option<OnCut>,
}

impl NarrowedStream {
    /// The stream's end for what it carried: recorded, then an error, which
    /// cuts the answer where it broke.
    fn cut(&mut self, e: gatehouse_mcp::Invalid) -> Box<dyn std::error::Error + Send + Sync> {
        self.filter = None;
        if let Some(on_cut) = self.on_cut.take() {
            on_cut();
        }
        Box::new(e)
    }
}

impl Body for NarrowedStream {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            let Some(filter) = this.filter.as_mut() else { return Poll::Ready(None) };
            let first = filter.start();
            if !first.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(first)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = match filter.push(&data) {
                            Ok(out) => out,
                            Err(e) => return Poll::Ready(Some(Err(this.cut(e)))),
                        };
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    // Trailers pass as they came.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let Some(filter) = this.filter.take() else { return Poll::Ready(None) };
                    let rest = match filter.finish() {
                        Ok(rest) => rest,
                        Err(e) => return Poll::Ready(Some(Err(this.cut(e)))),
                    };
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A body arriving in the pieces given.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Box<dyn std::error::Error + Send + Sync>;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test]
    async fn a_stream_is_narrowed_however_it_arrives() {
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"},{"name":"rm"}]}}"#;
        let stream = format!("id: 1\ndata: {list}\n\n");
        let chunks = stream.as_bytes().chunks(7).map(Bytes::copy_from_slice).collect();
        let inner = Chunks(chunks).boxed_unsync();
        let error = serde_json::json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32003}});
        let rules = gatehouse_mcp::ToolRules { allow: None, deny: vec!["rm".into()] };
        let narrowed = NarrowedStream { inner, filter: Some(SseFilter::new(rules, &[error])), on_cut: None };
        let out = narrowed.collect().await.unwrap().to_bytes();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(text.starts_with("event: message\ndata: {\"error\""), "{text}");
        assert!(text.contains(r#"{"name":"echo"}"#) && !text.contains(r#"{"name":"rm"}"#), "{text}");
    }

    #[tokio::test]
    async fn a_stream_that_cannot_be_read_is_cut_and_the_cut_recorded() {
        // A tools list written twice in one event: a client might read the
        // second, so the stream is cut there, once.
        let twice = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[{"name":"rm"}]}}"#;
        let stream =
            format!("data: {{\"jsonrpc\":\"2.0\",\"method\":\"x\"}}\n\ndata: {twice}\n\ndata: more\n\n");
        let inner = Chunks(std::iter::once(Bytes::from(stream)).collect()).boxed_unsync();
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = cuts.clone();
        let on_cut: OnCut = Box::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let rules = gatehouse_mcp::ToolRules::default();
        let mut narrowed =
            NarrowedStream { inner, filter: Some(SseFilter::new(rules, &[])), on_cut: Some(on_cut) };
        let got = std::future::poll_fn(|cx| Pin::new(&mut narrowed).poll_frame(cx)).await;
        assert!(
            got.unwrap().is_err(),
            "the event before the broken one is in the same chunk: all of it is cut"
        );
        assert!(std::future::poll_fn(|cx| Pin::new(&mut narrowed).poll_frame(cx)).await.is_none());
        assert_eq!(cuts.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
