//! Pinned connections: dial only an address the decision checked.
//!
//! There is no second resolution anywhere: the connector takes the vetted
//! addresses from the [`Decision`] and, at the moment of dialling, checks the
//! very address it connects to once more. A DNS answer that changes between
//! check and connect (rebinding) therefore changes nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_core::Reason;
use tokio::net::TcpStream;

use crate::decision::Decision;
use crate::special::AddressGuard;

/// Connects to the first of the decision's addresses that answers, giving
/// each at most `timeout`.
pub async fn connect_pinned(
    decision: &Decision,
    guard: &AddressGuard,
    timeout: Duration,
) -> Result<TcpStream, Reason> {
    let port = decision.port.ok_or(Reason::UpstreamUnreachable)?;
    if !decision.allowed() || decision.addresses.is_empty() {
        return Err(decision.refusal().unwrap_or(Reason::UpstreamUnreachable));
    }
    // The check at the socket, not only at the resolver, and of every
    // address before any is dialled: one forbidden address in an answer is
    // an attack, whatever else the answer holds.
    for ip in &decision.addresses {
        guard.check(*ip).map_err(|r| r.reason)?;
    }
    let mut last = Reason::UpstreamUnreachable;
    for ip in &decision.addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(SocketAddr::new(*ip, port))).await {
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

/// Builds the TLS client configuration: the system's roots, plus the PEM
/// certificates in `extra_roots` (an operator's internal CA).
pub fn tls_config(
    extra_roots: &[rustls::pki_types::CertificateDer<'static>],
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    for cert in extra_roots {
        roots.add(cert.clone()).map_err(|e| format!("an extra root certificate is not usable: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decision that claims to allow `addresses`, as a bug upstream of the
    /// dialler might produce.
    fn allowing(addresses: &[&str]) -> Decision {
        Decision {
            decision: "allow",
            reason: "allowed".into(),
            rule: None,
            rule_reason: None,
            per_request: false,
            host: Some("x.test".into()),
            port: Some(80),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            max_redirects: 0,
            dry_run_would_refuse: None,
            target: None,
        }
    }

    #[tokio::test]
    async fn the_dialler_checks_the_very_address_it_connects_to() {
        let guard = AddressGuard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        for (addresses, reason) in [
            (&["169.254.169.254"][..], Reason::AddressMetadata),
            (&["::ffff:127.0.0.1"][..], Reason::AddressEmbeddedIpv4),
            (&["10.0.0.1"][..], Reason::AddressSpecialPurpose),
            // A forbidden address second in the answer: nothing is dialled.
            (&["127.0.0.1", "::1"][..], Reason::AddressSpecialPurpose),
        ] {
            assert_eq!(
                connect_pinned(&allowing(addresses), &guard, Duration::from_secs(1)).await.unwrap_err(),
                reason,
                "{addresses:?}"
            );
        }
    }
}
