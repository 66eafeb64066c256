//! Key loading on arbitrary text: errors, never panics.
#![no_main]

use gatehouse_capability::{ManifestSigningKey, ManifestVerifyingKeys};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ManifestSigningKey::from_ed25519_text(&text);
    let _ = ManifestVerifyingKeys::from_public_keys_text(&text);
});
