//! Body canonicalization: the one-pass digest and the tree digest agree on
//! every input (both accept with the same digest, or both refuse), and
//! canonical output is a fixed point.
#![no_main]

use gatehouse_capability::canonical::{BodyDigest, canonical_string, parse_strict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let one_pass = BodyDigest::of_json_bytes(data);
    let tree = parse_strict(data).and_then(|v| BodyDigest::of_value(&v).map(|d| (d, v)));
    match (&one_pass, &tree) {
        (Ok(a), Ok((b, v))) => {
            assert_eq!(a, b);
            let canonical = canonical_string(v).expect("canonicalizable");
            let again = canonical_string(&parse_strict(canonical.as_bytes()).expect("canonical output parses"))
                .expect("canonicalizable");
            assert_eq!(canonical, again, "canonical form is a fixed point");
        }
        (Err(_), Err(_)) => {}
        _ => panic!("one-pass and tree canonicalization disagree: {one_pass:?}"),
    }
});
