//! The egress URL parser, the policy parser, the path normalizer and the
//! rule checks on arbitrary input: never panic; every accepted URL
//! re-parses to itself (one parser, one meaning); an accepted IPv4 host
//! appears in the input in canonical form; a normalized path normalizes to
//! itself; a policy that parses decides any URL either way without panic.
#![no_main]

use gatehouse_egress::policy::path;
use gatehouse_egress::{Host, Policy, parse_url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(target) = parse_url(&text) {
        assert_eq!(parse_url(&target.url()).as_ref(), Ok(&target), "not a fixed point");
        if let Host::Ip(std::net::IpAddr::V4(ip)) = target.host {
            assert!(text.contains(&ip.to_string()), "IPv4 accepted in a non-canonical spelling");
        }
        if let Ok(once) = path::normalize(&target.path_and_query) {
            assert_eq!(path::normalize(&once).as_ref(), Ok(&once), "a normalized path changes again");
        }
    }
    if let Ok(policy) = Policy::from_json(data) {
        for url in ["https://api.github.com/repos/x?y=1", "http://10.0.0.1:8080/a%2Fb", "https://pypi.org/simple/"] {
            let Ok(target) = parse_url(url) else { continue };
            let _ = policy.check_host(&target, 1_800_000_000);
            for method in [http::Method::GET, http::Method::DELETE] {
                let _ = policy.check_request(&target, &method, 1_800_000_000);
            }
        }
    }
});
