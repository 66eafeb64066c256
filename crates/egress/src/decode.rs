//! Content codings, decoded for the fetch API's caller (RFC 9110 §8.4).
//!
//! A fetch answer's size cap is about what the caller gets, and a compressed
//! body is not that: 12 KB of gzip can inflate to 13 MB. So the fetch client
//! decodes `gzip` (and `x-gzip`), `deflate`, `br` and `zstd` itself, reading
//! the decoder's output a chunk at a time and stopping at the cap
//! (`response_too_large`), never inflating the whole in one piece; the caller
//! gets the decoded bytes without `Content-Encoding`. A coding gatehouse
//! cannot decode, more than one coding stacked, or a body that does not
//! decode is `content_encoding_invalid`: a cap that cannot be checked is not
//! passed on unchecked. Every decoder is pure Rust (flate2 on zlib-rs,
//! brotli-decompressor, ruzstd).

use std::io::Read;

use bytes::Bytes;
use gatehouse_core::Reason;
use http::HeaderMap;
use http::header::CONTENT_ENCODING;

/// How much decoded output is taken from a decoder at a time.
const CHUNK: usize = 64 << 10;

/// The one content coding `headers` declare, lowercased, or `None` for the
/// identity. Stacked codings are refused (the safer reading: each layer
/// multiplies what a small body can become).
fn coding(headers: &HeaderMap) -> Result<Option<String>, Reason> {
    let mut codings = Vec::new();
    for value in headers.get_all(CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| Reason::ContentEncodingInvalid)?;
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("identity") {
                codings.push(coding.to_ascii_lowercase());
            }
        }
    }
    match codings.len() {
        0 => Ok(None),
        1 => Ok(codings.pop()),
        _ => Err(Reason::ContentEncodingInvalid),
    }
}

/// Decodes `body` as `headers` say, holding the output to `cap` bytes, and
/// drops `Content-Encoding` from `headers` once it no longer applies.
pub fn decode_body(headers: &mut HeaderMap, body: Bytes, cap: usize) -> Result<Bytes, Reason> {
    let Some(coding) = coding(headers)? else {
        headers.remove(CONTENT_ENCODING);
        return Ok(body);
    };
    let input = &body[..];
    let decoded = match coding.as_str() {
        "gzip" | "x-gzip" => read_capped(flate2::read::MultiGzDecoder::new(input), cap),
        // RFC 9110 §8.4.1.2: "deflate" is the zlib format; some servers send
        // raw deflate, which a zlib header check tells apart (RFC 1950 §2.2).
        "deflate" if is_zlib_header(input) => read_capped(flate2::read::ZlibDecoder::new(input), cap),
        "deflate" => read_capped(flate2::read::DeflateDecoder::new(input), cap),
        "br" => read_capped(brotli_decompressor::Decompressor::new(input, CHUNK), cap),
        "zstd" => {
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(input).map_err(|_| Reason::ContentEncodingInvalid)?;
            read_capped(decoder, cap)
        }
        _ => Err(Reason::ContentEncodingInvalid),
    }?;
    headers.remove(CONTENT_ENCODING);
    Ok(decoded)
}

fn is_zlib_header(input: &[u8]) -> bool {
    match input {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// Everything `decoder` yields, a chunk at a time, or `response_too_large`
/// as soon as it passes `cap`.
fn read_capped(mut decoder: impl Read, cap: usize) -> Result<Bytes, Reason> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Reason::ContentEncodingInvalid),
        };
        if out.len() + n > cap {
            return Err(Reason::ResponseTooLarge);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::io::Write as _;

    fn encoded(coding: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, HeaderValue::from_str(coding).unwrap());
        h
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// A brotli stream of uncompressed meta-blocks (RFC 7932 §9.2), built by
    /// hand: brotli-decompressor has no encoder.
    fn brotli_stored(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, block) in data.chunks(1 << 16).enumerate() {
            // WBITS (one 0 bit: a 64 KiB window) before the first block
            // only, then ISLAST=0, MNIBBLES=4, MLEN-1 in 16 bits,
            // ISUNCOMPRESSED=1, padded to the byte.
            let shift = u32::from(i == 0);
            let header = ((block.len() as u32 - 1) << (3 + shift)) | (1 << (19 + shift));
            out.extend_from_slice(&header.to_le_bytes()[..3]);
            out.extend_from_slice(block);
        }
        out.push(0b11); // ISLAST, ISLASTEMPTY
        out
    }

    #[test]
    fn each_coding_is_decoded_and_its_header_dropped() {
        let text = b"hello, decoded world ".repeat(100);
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(&text).unwrap();
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(&text).unwrap();
        let zstd = ruzstd::encoding::compress_to_vec(&text[..], ruzstd::encoding::CompressionLevel::Fastest);
        for (coding, body) in [
            ("gzip", gzip(&text)),
            ("X-Gzip", gzip(&text)),
            ("deflate", zlib.finish().unwrap()),
            ("deflate", raw.finish().unwrap()),
            ("br", brotli_stored(&text)),
            ("zstd", zstd),
            ("identity, gzip", gzip(&text)),
        ] {
            let mut headers = encoded(coding);
            let decoded = decode_body(&mut headers, body.into(), 1 << 20).unwrap();
            assert_eq!(&decoded[..], &text[..], "{coding}");
            assert!(!headers.contains_key(CONTENT_ENCODING), "{coding}");
        }
        let mut plain = HeaderMap::new();
        assert_eq!(decode_body(&mut plain, Bytes::from_static(b"as is"), 5).unwrap(), "as is");
    }

    #[test]
    fn the_cap_applies_to_what_the_body_decodes_to() {
        // 13 MB of zeros is a few kilobytes of gzip.
        let bomb = gzip(&vec![0u8; 13 << 20]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        assert_eq!(decode_body(&mut encoded("gzip"), bomb.into(), 128 << 10), Err(Reason::ResponseTooLarge));
        let zstd = ruzstd::encoding::compress_to_vec(
            &vec![0u8; 4 << 20][..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(decode_body(&mut encoded("zstd"), zstd.into(), 1 << 20), Err(Reason::ResponseTooLarge));
        let br = brotli_stored(&vec![7u8; 300_000]);
        assert_eq!(
            decode_body(&mut encoded("br"), br.clone().into(), 299_999),
            Err(Reason::ResponseTooLarge)
        );
        assert_eq!(decode_body(&mut encoded("br"), br.into(), 300_000).unwrap().len(), 300_000);
    }

    #[test]
    fn what_cannot_be_decoded_is_refused_not_passed_on() {
        for (coding, body) in [
            ("compress", b"anything".to_vec()),
            ("gzip, br", gzip(b"two layers")),
            ("gzip", b"not gzip at all".to_vec()),
            ("gzip", gzip(b"cut short")[..12].to_vec()),
            ("br", vec![0xff; 16]),
            ("zstd", b"\x28\xb5\x2f\xfd garbage".to_vec()),
        ] {
            assert_eq!(
                decode_body(&mut encoded(coding), body.into(), 1 << 20),
                Err(Reason::ContentEncodingInvalid),
                "{coding}"
            );
        }
    }
}
