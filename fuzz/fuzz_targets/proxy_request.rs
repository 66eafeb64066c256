//! What the proxy parses from a client before any check: the CONNECT
//! authority and the Proxy-Authorization header. Never panics; an accepted
//! authority re-parses to itself.
#![no_main]

use gatehouse_egress::proxy::grant_from_proxy_authorization;
use gatehouse_egress::target::parse_authority;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((host, port)) = parse_authority(&text) {
        let again = match port {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        assert_eq!(parse_authority(&again), Ok((host, port)));
    }
    let _ = grant_from_proxy_authorization(&text);
});
