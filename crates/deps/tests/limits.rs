//! Oversized input is refused before any parser runs.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use gatehouse_deps::ParseErrorCode;
use gatehouse_deps::lockfile::{MAX_LOCKFILE_BYTES, parse};

#[test]
fn a_lockfile_over_the_cap_is_too_large_whatever_its_format() {
    let mut big = b"{\"lockfileVersion\": 3, \"packages\": {}, \"pad\": \"".to_vec();
    big.resize(MAX_LOCKFILE_BYTES + 1, b'a');
    for name in ["package-lock.json", "yarn.lock", "Cargo.lock", "requirements.txt", "whatever"] {
        let e = parse(name, &big).unwrap_err();
        assert_eq!(e.code, ParseErrorCode::TooLarge, "{name}");
        assert_eq!(e.file, name);
    }
}
