//! CVSS vectors from advisories: scoring never panics, and a score is
//! always within 0.0..=10.0.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(vector) = std::str::from_utf8(data) else { return };
    if let Ok(score) = gatehouse_deps::severity::cvss(vector) {
        assert!((0.0..=10.0).contains(&score.base_score));
    }
});
