//! The content scanner this node runs: sniffing, plus clamd when
//! `CLAMD_HOST` is set, dialled through the egress crate's service endpoint.

use std::time::Duration;

use gatehouse_content::ContentScanner;
use gatehouse_content::clamd::{Clamd, DialFuture, Dialer, Stream};
use gatehouse_egress::service::ServiceEndpoint;

struct EgressDialer(ServiceEndpoint);

impl Dialer for EgressDialer {
    fn dial(&self) -> DialFuture<'_> {
        Box::pin(async move { Ok(Box::new(self.0.connect().await?) as Box<dyn Stream>) })
    }

    fn describe(&self) -> String {
        self.0.describe()
    }
}

/// A clamd client for `host:port`; the connect step gets at most the whole
/// exchange's `timeout`.
pub fn clamd(host: &str, port: u16, timeout: Duration) -> Clamd {
    Clamd::new(Box::new(EgressDialer(ServiceEndpoint::new(host, port, timeout))), timeout)
}

/// The scanner for a configuration's `CLAMD_*` and content settings.
pub fn content_scanner(clamd_at: Option<(&str, u16)>, timeout: Duration, max_bytes: u64) -> ContentScanner {
    ContentScanner::new(max_bytes, clamd_at.map(|(host, port)| clamd(host, port, timeout)))
}
