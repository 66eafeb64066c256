//! Canonical JSON (RFC 8785, JCS) and the execute-body digest.
//!
//! A manifest is bound to the SHA-256 of the execute request body. Hashing the
//! raw bytes would make the binding break whenever a proxy re-serializes the
//! body; hashing a canonical form means field order and whitespace do not
//! change the digest, while any change of value does.
//!
//! Two choices make the binding safe rather than merely convenient:
//! - **Duplicate object keys are refused.** Parsers disagree about
//!   `{"cmd":"ls","cmd":"rm -rf /"}` (first wins, last wins, error), so a body
//!   that one side reads differently from the other must never verify.
//! - **Numbers must be I-JSON (RFC 7493 §2.2).** JCS models numbers as
//!   IEEE-754 doubles, so `9007199254740993` and `9007199254740992` would
//!   canonicalize alike; any number whose magnitude exceeds 2^53−1 (however
//!   it is written) is refused instead of being rounded into a collision.
//!   Lone surrogates in strings are refused by the parser.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The largest integer JCS can represent exactly (2^53 − 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a body cannot be canonicalized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// Not JSON, or JSON with a duplicate key or a lone surrogate.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// A number outside the I-JSON range.
    #[error("a number is outside the exactly representable range (±2^53-1)")]
    NumberOutOfRange,
}

/// The SHA-256 of a body's canonical form, as it appears in
/// `execute_body_sha256` (lowercase hex).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyDigest(pub [u8; 32]);

impl BodyDigest {
    /// Digest of a JSON body given as bytes: parsed and canonicalized in one
    /// pass, without building a tree (this is on every verification's path).
    pub fn of_json_bytes(bytes: &[u8]) -> Result<Self, CanonicalError> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let written = CanonicalSeed { out: &mut out }.deserialize(&mut de).and_then(|()| de.end());
        match written {
            Ok(()) => Ok(Self(Sha256::digest(&out).into())),
            Err(e) if e.to_string().starts_with(OUT_OF_RANGE) => Err(CanonicalError::NumberOutOfRange),
            Err(e) => Err(CanonicalError::Syntax(syntax_message(&e))),
        }
    }

    /// Digest of an already-parsed JSON value.
    pub fn of_value(value: &Value) -> Result<Self, CanonicalError> {
        // Canonicalize into one buffer, then hash once: cheaper than feeding
        // the hasher many one-byte pieces.
        let mut out = Vec::with_capacity(1024);
        write_canonical(value, &mut out)?;
        Ok(Self(Sha256::digest(&out).into()))
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for BodyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BodyDigest({})", self.to_hex())
    }
}

/// Parses JSON, refusing duplicate object keys anywhere in the document.
/// Nesting is bounded by serde_json's recursion limit (128).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, CanonicalError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue.deserialize(&mut de).map_err(|e| CanonicalError::Syntax(syntax_message(&e)))?;
    de.end().map_err(|e| CanonicalError::Syntax(syntax_message(&e)))?;
    Ok(value)
}

/// serde_json messages can quote input (`invalid type: string "…"`); keep only
/// the category and position so no body fragment travels further.
fn syntax_message(e: &serde_json::Error) -> String {
    let what = match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "invalid data (duplicate key or unsupported value)",
        serde_json::error::Category::Eof => "unexpected end of input",
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

/// Writes the RFC 8785 form of `value`.
pub fn canonical_string(value: &Value) -> Result<String, CanonicalError> {
    let mut out = Vec::new();
    write_canonical(value, &mut out)?;
    // Canonical output is built from valid UTF-8 pieces only.
    String::from_utf8(out).map_err(|_| CanonicalError::Syntax("invalid UTF-8".into()))
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.extend_from_slice(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b",");
                }
                write_canonical(item, out)?;
            }
            out.extend_from_slice(b"]");
        }
        Value::Object(map) => write_object(map, out)?,
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    // JCS sorts by UTF-16 code units, which differs from code point order
    // only when a key holds a character at or above U+E000. The map's own
    // order is not relied on: a dependency enabling serde_json's
    // `preserve_order` feature would silently turn it into insertion order.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if map.keys().any(|k| k.chars().any(|c| c >= '\u{E000}')) {
        entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    } else {
        entries.sort_by(|a, b| a.0.cmp(b.0));
    }
    out.extend_from_slice(b"{");
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        write_string(k, out);
        out.extend_from_slice(b":");
        write_canonical(v, out)?;
    }
    out.extend_from_slice(b"}");
    Ok(())
}

fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonicalError::NumberOutOfRange);
        }
        out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalError::NumberOutOfRange);
        }
        out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
    } else if let Some(f) = n.as_f64() {
        // The same bound applies to numbers written with a fraction or an
        // exponent: JCS prints doubles below 1e21 in integer form, so
        // `9007199254740993.0` would come back out as an integer no exact
        // parser could read the same way, and the canonical form would no
        // longer be a fixed point.
        if f.abs() > MAX_SAFE_INTEGER as f64 {
            return Err(CanonicalError::NumberOutOfRange);
        }
        let mut buf = ryu_js::Buffer::new();
        out.extend_from_slice(buf.format_finite(f).as_bytes());
    } else {
        return Err(CanonicalError::NumberOutOfRange);
    }
    Ok(())
}

/// JCS string escaping (RFC 8785 §3.2.2.2): the two-character escapes for
/// `\b \f \n \r \t \" \\`, lowercase `\u00xx` for the other control
/// characters, and every other character (including `/`, DEL and non-ASCII)
/// as its UTF-8 bytes.
fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

const OUT_OF_RANGE: &str = "number out of I-JSON range";

/// Parses one JSON value and writes its canonical form, refusing duplicate
/// keys and out-of-range integers exactly as [`parse_strict`] followed by
/// [`canonical_string`] would (a property test holds the two paths equal).
struct CanonicalSeed<'a> {
    out: &'a mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for CanonicalSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CanonicalSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write_number(&serde_json::Number::from(v), self.out).map_err(|_| E::custom(OUT_OF_RANGE))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write_number(&serde_json::Number::from(v), self.out).map_err(|_| E::custom(OUT_OF_RANGE))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        let n = serde_json::Number::from_f64(v).ok_or_else(|| E::custom("non-finite number"))?;
        write_number(&n, self.out).map_err(|_| E::custom(OUT_OF_RANGE))
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        write_string(v, self.out);
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            // Write the separator first, and take it back if the array ended.
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq.next_element_seed(CanonicalSeed { out: &mut *self.out })?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        // Every value of this object goes into one buffer; entries remember
        // their key and byte range, and are emitted in canonical key order.
        let mut values = Vec::new();
        let mut entries: Vec<(Key<'de>, std::ops::Range<usize>)> = Vec::new();
        while let Some(key) = access.next_key::<Key<'de>>()? {
            let start = values.len();
            access.next_value_seed(CanonicalSeed { out: &mut values })?;
            entries.push((key, start..values.len()));
        }
        if entries.iter().any(|(k, _)| k.as_str().chars().any(|c| c >= '\u{E000}')) {
            entries.sort_by(|a, b| a.0.as_str().encode_utf16().cmp(b.0.as_str().encode_utf16()));
        } else {
            entries.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        }
        if entries.windows(2).any(|w| w[0].0.as_str() == w[1].0.as_str()) {
            return Err(de::Error::custom("duplicate key"));
        }
        self.out.push(b'{');
        for (i, (k, range)) in entries.into_iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            write_string(k.as_str(), self.out);
            self.out.push(b':');
            self.out.extend_from_slice(&values[range]);
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// An object key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A `serde_json::Value` deserializer that refuses duplicate keys.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let value = access.next_value_seed(StrictValue)?;
            if map.insert(key, value).is_some() {
                return Err(de::Error::custom("duplicate key"));
            }
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        canonical_string(&parse_strict(s.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn rfc8785_examples() {
        // RFC 8785 section 3.2.2 / appendix B number and string samples,
        // less `1E30`, which gatehouse refuses (magnitude beyond 2^53-1).
        assert_eq!(
            canon(
                r#"{"numbers":[333333333.33333329,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#
            ),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        // RFC 8785 section 3.2.3: sorting by UTF-16 code units.
        assert_eq!(
            canon(
                r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#
            ),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn order_and_whitespace_do_not_change_the_digest_but_values_do() {
        let a = BodyDigest::of_json_bytes(br#"{"a":1,"b":[1,2,{"c":"x"}]}"#).unwrap();
        let b = BodyDigest::of_json_bytes(b" { \"b\" : [ 1 , 2 , { \"c\" : \"x\" } ] ,\n \"a\" : 1.0 } ")
            .unwrap();
        assert_eq!(a, b);
        let c = BodyDigest::of_json_bytes(br#"{"a":1,"b":[1,2,{"c":"y"}]}"#).unwrap();
        assert_ne!(a, c);
        let d = BodyDigest::of_json_bytes(br#"{"a":1,"b":[2,1,{"c":"x"}]}"#).unwrap();
        assert_ne!(a, d);
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(parse_strict(br#"{"cmd":"ls","cmd":"rm"}"#).is_err());
        assert!(parse_strict(br#"{"a":[{"x":1,"x":1}]}"#).is_err());
    }

    #[test]
    fn numbers_that_would_collide_are_refused() {
        assert_eq!(
            parse_strict(b"9007199254740991").map(|v| canonical_string(&v).unwrap()).unwrap(),
            "9007199254740991"
        );
        assert_eq!(BodyDigest::of_json_bytes(b"9007199254740993"), Err(CanonicalError::NumberOutOfRange));
        assert_eq!(BodyDigest::of_json_bytes(b"-9007199254740992"), Err(CanonicalError::NumberOutOfRange));
        // Found by fuzzing: a large float prints in integer form under JCS.
        assert_eq!(
            BodyDigest::of_json_bytes(b"1333333333333313112.0"),
            Err(CanonicalError::NumberOutOfRange)
        );
        assert_eq!(BodyDigest::of_json_bytes(b"1e300"), Err(CanonicalError::NumberOutOfRange));
        assert!(BodyDigest::of_json_bytes(b"[1e-300, 0.5, -2.5e15]").is_ok());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [&b""[..], b"{", b"[1,]", b"\"\\ud800\"", b"1e999", b"{} x", b"\xff"] {
            assert!(BodyDigest::of_json_bytes(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(BodyDigest::of_json_bytes(deep.as_bytes()).is_err());
    }

    proptest::proptest! {
        /// The one-pass digest and the tree digest agree on every document.
        #[test]
        fn one_pass_and_tree_digests_agree(v in arb_json()) {
            let text = serde_json::to_vec(&v).unwrap();
            let tree = parse_strict(&text).and_then(|v| BodyDigest::of_value(&v));
            proptest::prop_assert_eq!(BodyDigest::of_json_bytes(&text), tree);
        }

        /// Reordering keys and adding whitespace never changes the digest.
        #[test]
        fn pretty_printing_keeps_the_digest(v in arb_json()) {
            let compact = serde_json::to_vec(&v).unwrap();
            let pretty = serde_json::to_vec_pretty(&v).unwrap();
            proptest::prop_assert_eq!(BodyDigest::of_json_bytes(&compact), BodyDigest::of_json_bytes(&pretty));
        }
    }

    fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(Value::from),
            (-9.0e15f64..9.0e15).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite and small", |f| f.is_finite() && f.abs() < 9.0e15)
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            proptest::string::string_regex("[\\x00-\\x1f\"\\\\\u{e000}-\u{e010}\u{1f600}a-z]{0,6}")
                .unwrap()
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\u{e000}\u{1f600}]{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn one_pass_refuses_what_the_tree_refuses() {
        for bad in [&br#"{"a":1,"a":2}"#[..], br#"[{"x":{"y":1,"y":1}}]"#] {
            assert!(matches!(BodyDigest::of_json_bytes(bad), Err(CanonicalError::Syntax(_))));
        }
        assert_eq!(
            BodyDigest::of_json_bytes(b"[1, 9007199254740993]"),
            Err(CanonicalError::NumberOutOfRange)
        );
    }

    #[test]
    fn error_messages_do_not_echo_input() {
        let err = parse_strict(br#"{"token": "s3cr3t", "token": 1}"#).unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"));
        assert!(!err.to_string().contains("token"));
    }
}
