//! A stored credential's sealed form, as the gateway reads it back from a
//! database row anyone with database access could have edited. Never
//! panics; nothing but a value sealed for this very row opens.
#![no_main]

use gatehouse_capability::credential::{CredentialContext, SealedSecret};
use gatehouse_capability::{SealingKey, SealingKeys};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(key) = SealingKey::from_text("ZnV6ei1zZWFsaW5nLWtleS0wMTIzNDU2Nzg5YWJjZGU") else { return };
    let Ok(keys) = SealingKeys::new(key, None) else { return };
    let context = CredentialContext {
        tenant_id: "t1",
        credential_id: "cred_1",
        version: 1,
        purpose: "git_provider",
        host: "api.github.com",
        delivery: r#"{"header":"authorization","format":"Bearer {secret}"}"#,
    };
    if let Ok(sealed) = SealedSecret::parse(&text) {
        assert_eq!(
            SealedSecret::parse(sealed.as_str()).ok().as_ref().map(SealedSecret::as_str),
            Some(sealed.as_str())
        );
        let _ = keys.open(&sealed, &context);
    }
});
