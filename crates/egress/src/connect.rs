//! Pinned connections: dial only an address the decision checked.
//!
//! There is no second resolution anywhere: the connector takes the vetted
//! addresses from the [`Decision`] and, at the moment of dialling, checks the
//! very address it connects to once more. A DNS answer that changes between
//! check and connect (rebinding) therefore changes nothing.

use std::net::SocketAddr;
use std::time::Duration;

use gatehouse_core::Reason;
use tokio::net::TcpStream;

use crate::decision::Decision;
use crate::special::AddressGuard;

/// How long one TCP connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the first of the decision's addresses that answers.
pub async fn connect_pinned(decision: &Decision, guard: &AddressGuard) -> Result<TcpStream, Reason> {
    let port = decision.port.ok_or(Reason::UpstreamUnreachable)?;
    if !decision.allowed() || decision.addresses.is_empty() {
        return Err(decision.refusal().unwrap_or(Reason::UpstreamUnreachable));
    }
    let mut last = Reason::UpstreamUnreachable;
    for ip in &decision.addresses {
        // The check at the socket, not only at the resolver.
        if let Err(r) = guard.check(*ip) {
            return Err(r.reason);
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(SocketAddr::new(*ip, port))).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(_)) => last = Reason::UpstreamUnreachable,
            Err(_) => last = Reason::UpstreamTimeout,
        }
    }
    Err(last)
}
