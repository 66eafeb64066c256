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
//! - **Numbers must be I-JSON (RFC 7493).** JCS models numbers as IEEE-754
//!   doubles, so `9007199254740993` and `9007199254740992` would canonicalize
//!   alike; an integer outside ±(2^53−1) is refused instead of being rounded
//!   into a collision. Lone surrogates in strings are refused by the parser.

use std::fmt;

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
    /// Digest of a JSON body given as bytes.
    pub fn of_json_bytes(bytes: &[u8]) -> Result<Self, CanonicalError> {
        Self::of_value(&parse_strict(bytes)?)
    }

    /// Digest of an already-parsed JSON value.
    pub fn of_value(value: &Value) -> Result<Self, CanonicalError> {
        let mut sink = HashSink(Sha256::new());
        write_canonical(value, &mut sink)?;
        Ok(Self(sink.0.finalize().into()))
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
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
    let value = StrictValue
        .deserialize(&mut de)
        .map_err(|e| CanonicalError::Syntax(syntax_message(&e)))?;
    de.end()
        .map_err(|e| CanonicalError::Syntax(syntax_message(&e)))?;
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
    let mut out = VecSink(Vec::new());
    write_canonical(value, &mut out)?;
    // Canonical output is built from valid UTF-8 pieces only.
    String::from_utf8(out.0).map_err(|_| CanonicalError::Syntax("invalid UTF-8".into()))
}

trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

struct HashSink(Sha256);
impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

struct VecSink(Vec<u8>);
impl Sink for VecSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

fn write_canonical(value: &Value, out: &mut impl Sink) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_canonical(item, out)?;
            }
            out.put(b"]");
        }
        Value::Object(map) => write_object(map, out)?,
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut impl Sink) -> Result<(), CanonicalError> {
    // serde_json's map iterates in UTF-8 byte order, which equals code point
    // order. JCS sorts by UTF-16 code units; the two orders differ only when a
    // key holds a character at or above U+E000, so re-sort only then.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if map.keys().any(|k| k.chars().any(|c| c >= '\u{E000}')) {
        entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    }
    out.put(b"{");
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.put(b",");
        }
        write_string(k, out);
        out.put(b":");
        write_canonical(v, out)?;
    }
    out.put(b"}");
    Ok(())
}

fn write_number(n: &serde_json::Number, out: &mut impl Sink) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonicalError::NumberOutOfRange);
        }
        out.put(u.to_string().as_bytes());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalError::NumberOutOfRange);
        }
        out.put(i.to_string().as_bytes());
    } else if let Some(f) = n.as_f64() {
        // A float with an integral value beyond 2^53 (e.g. 1e300) is a valid
        // double, and JCS prints it in ECMAScript form; only integer tokens
        // risk silent rounding, and those arrive as u64/i64 above.
        let mut buf = ryu_js::Buffer::new();
        out.put(buf.format_finite(f).as_bytes());
    } else {
        return Err(CanonicalError::NumberOutOfRange);
    }
    Ok(())
}

fn write_string(s: &str, out: &mut impl Sink) {
    // serde_json's escaping is exactly JCS's: the two-character escapes for
    // \b \f \n \r \t \" \\, lowercase \u00xx for other control characters,
    // and everything else (including '/' and non-ASCII) as is.
    let mut buf = Vec::with_capacity(s.len() + 2);
    if serde_json::to_writer(&mut buf, s).is_ok() {
        out.put(&buf);
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
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
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
            if map.contains_key(&key) {
                return Err(de::Error::custom("duplicate key"));
            }
            let value = access.next_value_seed(StrictValue)?;
            map.insert(key, value);
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
        // RFC 8785 section 3.2.2 / appendix B number and string samples.
        assert_eq!(
            canon(
                r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#
            ),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
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
        let b = BodyDigest::of_json_bytes(
            b" { \"b\" : [ 1 , 2 , { \"c\" : \"x\" } ] ,\n \"a\" : 1.0 } ",
        )
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
            parse_strict(b"9007199254740991")
                .map(|v| canonical_string(&v).unwrap())
                .unwrap(),
            "9007199254740991"
        );
        assert_eq!(
            BodyDigest::of_json_bytes(b"9007199254740993"),
            Err(CanonicalError::NumberOutOfRange)
        );
        assert_eq!(
            BodyDigest::of_json_bytes(b"-9007199254740992"),
            Err(CanonicalError::NumberOutOfRange)
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"{",
            b"[1,]",
            b"\"\\ud800\"",
            b"1e999",
            b"{} x",
            b"\xff",
        ] {
            assert!(BodyDigest::of_json_bytes(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(BodyDigest::of_json_bytes(deep.as_bytes()).is_err());
    }

    #[test]
    fn error_messages_do_not_echo_input() {
        let err = parse_strict(br#"{"token": "s3cr3t", "token": 1}"#).unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"));
        assert!(!err.to_string().contains("token"));
    }
}
