//! gatehouse's OSV traffic: the transport that carries the `gatehouse-deps`
//! OSV client through the egress fetch client (the one outbound door), under
//! an open policy (gatehouse's own call, no tenant) with every address check.

use bytes::Bytes;
use gatehouse_deps::osv_client::{Response, Transport, TransportFuture};
use gatehouse_egress::Policy;
use gatehouse_egress::fetch::{FetchRequest, Fetcher};
use http::{HeaderMap, HeaderValue, Method, header};

/// OSV requests through the door.
pub struct EgressTransport {
    fetcher: Fetcher,
    policy: Policy,
}

impl EgressTransport {
    /// A transport over `fetcher`.
    pub fn new(fetcher: Fetcher) -> Self {
        Self { fetcher, policy: Policy::open() }
    }

    async fn send(&self, method: Method, url: &str, body: Vec<u8>) -> Result<Response, String> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        if method == Method::POST {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let request = FetchRequest {
            method,
            url: url.to_owned(),
            headers,
            body: Bytes::from(body),
            purpose: gatehouse_egress::Purpose::Request,
            scrub: Default::default(),
            last_check: None,
        };
        match self.fetcher.fetch(Ok(&self.policy), request).await {
            Ok(r) => Ok(Response { status: r.status.as_u16(), body: r.body.to_vec() }),
            // The reason code and host only: never the URL's path or query.
            Err(refusal) => Err(match refusal.host {
                Some(host) => format!("{} ({host})", refusal.reason),
                None => refusal.reason.to_string(),
            }),
        }
    }
}

impl Transport for EgressTransport {
    fn post_json<'a>(&'a self, url: &'a str, body: Vec<u8>) -> TransportFuture<'a> {
        Box::pin(self.send(Method::POST, url, body))
    }

    fn get<'a>(&'a self, url: &'a str) -> TransportFuture<'a> {
        Box::pin(self.send(Method::GET, url, Vec::new()))
    }
}
