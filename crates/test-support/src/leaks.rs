//! Whether key material reached an output, in any of the forms it takes.
//!
//! Comparing the start of a PEM file proves little: its first 21 base64
//! characters are the fixed PKCS#8 header every Ed25519 key shares. These
//! checks look for the key material itself, whole and in pieces of 15-16
//! bytes, as PEM (the whole text and each line), raw DER, base64 (standard
//! and URL alphabets, at each of the three byte alignments it can have
//! inside a longer encoding) and hex (either case), in the output as
//! written and with whitespace and JSON escapes of line breaks removed (a
//! PEM wrapped differently, or logged inside JSON).

/// The DER header of an unencrypted PKCS#8 v1 Ed25519 private key: the same
/// for every key, so not material. The 32-byte seed follows it.
const ED25519_PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// Pieces of material shorter than this many bytes are not looked for (a
/// shorter one could occur by chance).
const PIECE_BYTES: usize = 15;

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of `bytes`, with padding.
pub fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(alphabet[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding and whitespace ignored); `None` if any
/// other character occurs.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = STANDARD.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// The DER inside a PEM text (the base64 between its `-----` lines).
pub fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64_decode(&body).expect("a PEM body is base64")
}

/// PEM of `der` under `label`, wrapped at 64 characters as RFC 7468 says.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der, STANDARD);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|l| std::str::from_utf8(l).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// One form of the material: what it is, and the bytes to look for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// `"hex"`, `"base64url, offset 1, piece at 4"`, ...
    pub name: String,
    /// The bytes that must not appear.
    pub needle: Vec<u8>,
}

/// Every form of `key` (a DER key, or any secret's bytes) to look for: the
/// whole DER as PEM (text and lines), raw, base64 and hex, and every piece
/// of [`PIECE_BYTES`] of its material (the DER less a fixed PKCS#8 header)
/// in each of those encodings.
pub fn key_forms(key: &[u8]) -> Vec<Form> {
    let mut forms = Vec::new();
    let mut add = |name: String, needle: Vec<u8>| {
        if !needle.is_empty() && !forms.iter().any(|f: &Form| f.needle == needle) {
            forms.push(Form { name, needle });
        }
    };
    // The whole of it.
    let whole = base64(key, STANDARD);
    for label in ["PRIVATE KEY", "PUBLIC KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"] {
        add(format!("PEM ({label})"), pem(label, key).into_bytes());
    }
    for (i, line) in whole.as_bytes().chunks(64).enumerate() {
        add(format!("PEM line {i}"), line.to_vec());
    }
    add("DER".into(), key.to_vec());
    add("base64".into(), whole.clone().into_bytes());
    add("base64, unpadded".into(), whole.trim_end_matches('=').as_bytes().to_vec());
    add("base64url".into(), base64(key, URL_SAFE).trim_end_matches('=').as_bytes().to_vec());
    add("hex".into(), hex::encode(key).into_bytes());
    add("HEX".into(), hex::encode(key).to_uppercase().into_bytes());

    // Pieces of the material, each encoded at every alignment it can have.
    let material = key.strip_prefix(&ED25519_PKCS8_PREFIX[..]).unwrap_or(key);
    let piece = PIECE_BYTES.min(material.len());
    for start in 0..=material.len() - piece {
        let bytes = &material[start..start + piece];
        add(format!("DER piece at {start}"), bytes.to_vec());
        add(format!("hex piece at {start}"), hex::encode(bytes).into_bytes());
        add(format!("HEX piece at {start}"), hex::encode(bytes).to_uppercase().into_bytes());
        // Inside a longer base64 text the piece starts at any offset modulo
        // 3; the characters that depend on its bytes alone are those of the
        // whole 3-byte groups it covers.
        for skip in 0..3.min(bytes.len()) {
            let aligned = &bytes[skip..];
            let aligned = &aligned[..aligned.len() / 3 * 3];
            if aligned.len() >= 9 {
                for (alphabet, name) in [(STANDARD, "base64"), (URL_SAFE, "base64url")] {
                    add(format!("{name} piece at {start}+{skip}"), base64(aligned, alphabet).into_bytes());
                }
            }
        }
    }
    forms
}

/// The first form of `key` that appears in `output` (as written, or with
/// whitespace and the JSON escapes `\n`, `\r`, `\/` removed: a PEM wrapped
/// anew, or logged inside JSON), if any.
pub fn find_key_material(key: &[u8], output: &[u8]) -> Option<Form> {
    let text = String::from_utf8_lossy(output);
    let compact: String = text.replace("\\n", "").replace("\\r", "").replace("\\/", "/");
    let compact: String = compact.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    key_forms(key).into_iter().find(|f| match std::str::from_utf8(&f.needle) {
        // Text forms: std's substring search, on both readings.
        Ok(needle) if needle.is_ascii() => text.contains(needle) || compact.contains(needle),
        _ => output.windows(f.needle.len()).any(|w| w == f.needle),
    })
}

/// Panics, naming the form but never showing it, if any form of `key` (see
/// [`key_forms`]) appears in `output`. `what` says what the output was.
pub fn assert_no_key_material(key: &[u8], output: impl AsRef<[u8]>, what: &str) {
    if let Some(form) = find_key_material(key, output.as_ref()) {
        panic!("{what} carries key material ({}, {} bytes)", form.name, form.needle.len());
    }
}

/// [`assert_no_key_material`] for a key given as PEM text.
pub fn assert_no_pem_key(pem: &str, output: impl AsRef<[u8]>, what: &str) {
    assert_no_key_material(&pem_der(pem), output, what);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up Ed25519 PKCS#8 key (the header and 32 seed bytes).
    fn key() -> Vec<u8> {
        let seed: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(97).wrapping_add(13)).collect();
        [&ED25519_PKCS8_PREFIX[..], &seed].concat()
    }

    #[test]
    fn base64_matches_the_rfc_4648_examples() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
        ] {
            assert_eq!(base64(plain.as_bytes(), STANDARD), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn every_form_of_the_key_is_found_and_the_fixed_header_alone_is_not() {
        let key = key();
        let pem_text = pem("PRIVATE KEY", &key);
        assert_eq!(pem_der(&pem_text), key);
        let seed = &key[16..];
        let b64 = base64(&key, STANDARD);
        let leaks: Vec<(&str, Vec<u8>)> = vec![
            ("the PEM", format!("loaded {pem_text} ok").into_bytes()),
            ("the PEM in JSON", format!("{{\"key\":\"{}\"}}", pem_text.replace('\n', "\\n")).into_bytes()),
            ("the PEM rewrapped", b64.as_bytes().chunks(10).collect::<Vec<_>>().join(&b"\r\n"[..])),
            ("the DER", [&b"\x00\x01"[..], &key, b"\xff"].concat()),
            ("base64url", base64(&key, URL_SAFE).into_bytes()),
            ("hex", format!("key={}", hex::encode(&key)).into_bytes()),
            ("HEX", hex::encode(&key).to_uppercase().into_bytes()),
            ("the seed in hex", hex::encode(seed).into_bytes()),
            ("the seed in base64", base64(seed, STANDARD).into_bytes()),
            ("half the seed", hex::encode(&seed[..16]).into_bytes()),
            ("the seed inside other base64", base64(&[b"xy", seed, b"z"].concat(), URL_SAFE).into_bytes()),
            ("the seed inside other base64", base64(&[b"x", seed].concat(), STANDARD).into_bytes()),
            ("the raw seed", [b"seed:", seed].concat()),
        ];
        for (name, output) in leaks {
            assert!(find_key_material(&key, &output).is_some(), "{name} was not found");
            let caught = std::panic::catch_unwind(|| assert_no_key_material(&key, &output, name));
            assert!(caught.is_err(), "{name}");
        }
        // What every key shares, and another key, are no leak of this one.
        let header_only = format!("-----BEGIN PRIVATE KEY-----\n{}", &b64[..21]);
        let mut other = key.clone();
        for b in &mut other[16..] {
            *b ^= 0x5a;
        }
        for clean in [header_only, pem("PRIVATE KEY", &other), hex::encode(&other), String::new()] {
            assert_eq!(find_key_material(&key, clean.as_bytes()), None, "{clean}");
        }
    }

    #[test]
    fn a_secret_given_as_text_is_found_whole_and_in_pieces() {
        let secret = b"kq3lXb0Zr7s-T_aa91mPzV2cQe8wYhN4uJd6fG5oR1E";
        assert!(find_key_material(secret, b"token kq3lXb0Zr7s-T_aa91mPzV2cQe8wYhN4uJd6fG5oR1E").is_some());
        assert!(find_key_material(secret, b"prefix Zr7s-T_aa91mPzV2c").is_some());
        assert!(find_key_material(secret, base64(secret, STANDARD).as_bytes()).is_some());
        assert!(find_key_material(secret, b"kq3lXb0Zr7s").is_none(), "shorter than a piece");
    }
}
