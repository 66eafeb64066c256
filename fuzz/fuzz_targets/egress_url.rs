//! The egress URL parser and policy parser on arbitrary input: never panic;
//! every accepted URL re-parses to itself (one parser, one meaning); an
//! accepted IPv4 host appears in the input in canonical form.
#![no_main]

use gatehouse_egress::{Host, Policy, parse_url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(target) = parse_url(&text) {
        assert_eq!(parse_url(&target.url()).as_ref(), Ok(&target), "not a fixed point");
        if let Host::Ip(std::net::IpAddr::V4(ip)) = target.host {
            assert!(text.contains(&ip.to_string()), "IPv4 accepted in a non-canonical spelling");
        }
    }
    let _ = Policy::from_json(data);
});
