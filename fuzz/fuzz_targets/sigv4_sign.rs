//! A sandbox's request to a host an `aws_sigv4` lease signs for: the path,
//! query and headers are the sandbox's, entirely. Never panics; a request
//! is either refused with nothing changed, or leaves with exactly one
//! `Authorization` (the door's, for the stored key) and none of the
//! sandbox's own signature headers; the secret access key never appears.
#![no_main]

use gatehouse_capability::sigv4::{AwsKeys, Scope, Signer};
use gatehouse_egress::sigv4::{Payload, ToSign, sign};
use libfuzzer_sys::fuzz_target;

const SECRET: &str = "fuzzSecretAccessKeyQWRTYPXZJKMNVW0123456";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let path_and_query = lines.next().unwrap_or("/");
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(name.as_bytes()), http::HeaderValue::from_bytes(value.as_bytes()))
        else {
            continue;
        };
        headers.append(name, value);
    }
    let (Ok(keys), Ok(scope)) =
        (AwsKeys::new("AKIAFUZZFUZZFUZZFUZZ", SECRET, Some("fuzz-session-token")), Scope::new("us-east-1", "s3"))
    else {
        return;
    };
    let before = headers.clone();
    let payload = if data.first().is_some_and(|b| b & 1 == 0) { Payload::Streamed } else { Payload::InHand(data) };
    let request = ToSign { method: "PUT", authority: "bucket.example:8443", path_and_query, payload };
    let signer = Signer::new(keys, scope);
    match sign(&mut headers, &request, &signer, "gatehouse_lease_0123456789abcdef0123456789abcdef", 1_800_000_000) {
        Err(_) => assert_eq!(headers, before, "a refusal changes nothing"),
        Ok(_) => {
            let authorization: Vec<_> = headers.get_all("authorization").iter().collect();
            assert_eq!(authorization.len(), 1);
            let value = authorization[0].to_str().unwrap_or_default();
            assert!(value.starts_with("AWS4-HMAC-SHA256 Credential=AKIAFUZZFUZZFUZZFUZZ/"), "{value}");
            assert_eq!(headers.get_all("x-amz-date").iter().count(), 1);
            assert_eq!(headers.get_all("x-amz-security-token").iter().count(), 1);
            // The door adds nothing holding the key (the sandbox's own bytes aside).
            let holds_key = |v: &http::HeaderValue| v.as_bytes().windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
            let sent = headers.values().filter(|v| holds_key(v)).count();
            assert!(sent <= before.values().filter(|v| holds_key(v)).count());
        }
    }
});
