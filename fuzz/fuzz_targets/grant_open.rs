//! Grant opening on arbitrary tokens: never panics, never opens a forgery.
#![no_main]

use gatehouse_capability::{GrantSealer, Secret};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = Secret::new("fuzz-0123456789abcdefghijklmnopqrstuvwxyz").expect("strong secret");
    let sealer = GrantSealer::new(&secret);
    let text = String::from_utf8_lossy(data);
    assert!(sealer.open(&text, 1_800_000_000).is_err());
    // Also past the prefix check, so the decoder and AEAD see the input.
    let prefixed = format!("ceg1.{text}");
    assert!(sealer.open(&prefixed, 1_800_000_000).is_err());
});
