//! Connections to the operator's own services — clamd today.
//!
//! These are not destinations a run chooses: the address comes from
//! configuration, fixed at startup, and typically sits on loopback or a
//! private network, so the address guard (which exists to keep runs off
//! such networks) does not apply. They still leave through this crate, so
//! every socket gatehouse opens is opened here.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

/// A configured service address.
#[derive(Debug, Clone)]
pub struct ServiceEndpoint {
    host: String,
    port: u16,
    connect_timeout: Duration,
}

impl ServiceEndpoint {
    /// `host` is a name or an IP literal (IPv6 with or without brackets).
    pub fn new(host: &str, port: u16, connect_timeout: Duration) -> Self {
        let host = host.trim().trim_start_matches('[').trim_end_matches(']').to_owned();
        Self { host, port, connect_timeout }
    }

    /// `host:port`, for logs and status pages.
    pub fn describe(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Connects, trying each address the host resolves to, within the
    /// connect timeout (`TimedOut` when it passes).
    pub async fn connect(&self) -> io::Result<TcpStream> {
        match tokio::time::timeout(self.connect_timeout, TcpStream::connect((self.host.as_str(), self.port)))
            .await
        {
            Ok(stream) => {
                let stream = stream?;
                stream.set_nodelay(true)?;
                Ok(stream)
            }
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }
}
