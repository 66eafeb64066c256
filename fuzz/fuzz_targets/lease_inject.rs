//! What the door does with a sandbox's request under its run's leases: the
//! headers and URL are the sandbox's, entirely. Never panics; the secret
//! never comes back in a scrubbed answer, whole or any 8 of its bytes; a
//! placeholder toward another host is always refused; nothing is injected
//! over plain HTTP for a credential that does not allow it.
#![no_main]

use gatehouse_egress::inject::{Delivery, InjectRule, LeaseEntry, LeaseState, apply, examine, placeholder_for};
use libfuzzer_sys::fuzz_target;

/// Shares no 8 bytes with any placeholder (`gatehouse_lease_` and hex), in
/// any case: a window the placeholder itself holds comes back in every
/// scrubbed answer, and is no news to the sandbox that sent it.
const SECRET: &[u8] = b"fuzz-secret-QWRTYPXZJKMNVW";

fn leases() -> Vec<LeaseEntry> {
    let lease = |id: &str, host: &str, state, rule| LeaseEntry {
        lease_id: id.to_owned(),
        placeholder: placeholder_for(id).unwrap_or_default(),
        host: host.to_owned(),
        granted_at: 1,
        state,
        delivery: Delivery::Inject(rule),
        allow_plain_http: false,
    };
    vec![
        lease(
            "lease_0123456789abcdef0123456789abcdef",
            "a.example",
            LeaseState::Live { expires_at: 100 },
            InjectRule::basic("x-access-token").unwrap_or(InjectRule::Basic { username: "x".into() }),
        ),
        lease(
            "lease_fedcba9876543210fedcba9876543210",
            "b.example",
            LeaseState::Revoked { run_ended: false },
            InjectRule::header("authorization", "Bearer {secret}")
                .unwrap_or(InjectRule::Basic { username: "x".into() }),
        ),
    ]
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let path = lines.next().unwrap_or("/");
    let host = if data.first().is_some_and(|b| b & 1 == 0) { "a.example" } else { "b.example" };
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_bytes(value.trim().as_bytes()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let leases = leases();
    let over_tls = data.first().is_some_and(|b| b & 2 == 0);
    let Ok(examined) = examine(&headers, path, host, over_tls, &leases, 10) else { return };
    assert!(over_tls || examined.inject.is_none(), "no secret goes over plain HTTP here");
    let Some(i) = examined.inject else { return };
    assert_eq!(leases[i].host, host, "only the target host's lease is ever injected");
    let Ok(scrub) = apply(&mut headers, &leases[i], SECRET) else { return };
    // Whatever the upstream echoes, the sandbox gets no secret back.
    let mut echoed = http::HeaderMap::new();
    for (name, value) in &headers {
        echoed.append(name.clone(), value.clone());
    }
    scrub.headers(&mut echoed);
    // Not the secret, nor any 8 of its bytes, in a name or a value.
    let holds_a_window = |bytes: &[u8]| SECRET.windows(8).any(|w| bytes.windows(8).any(|b| b == w));
    for (name, value) in &echoed {
        assert!(!holds_a_window(value.as_bytes()) && !holds_a_window(name.as_str().as_bytes()));
    }
    let mut body = Vec::new();
    for value in headers.values() {
        body.extend_from_slice(value.as_bytes());
    }
    let mut scrubber = scrub.stream();
    let mut out = Vec::new();
    for chunk in body.chunks(7) {
        out.extend_from_slice(&scrubber.push(chunk));
    }
    out.extend_from_slice(&scrubber.finish());
    assert!(!holds_a_window(&out));
});
