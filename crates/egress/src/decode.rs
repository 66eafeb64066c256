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
use http_body_util::{BodyExt as _, combinators::UnsyncBoxBody};
use hyper::body::{Body, Frame};

/// How much decoded output is taken from a decoder at a time.
const CHUNK: usize = 64 << 10;

/// The content codings gatehouse decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    Gzip,
    Deflate,
    Brotli,
    Zstd,
}

impl Coding {
    fn parse(name: &str) -> Result<Self, Reason> {
        match name.to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Ok(Coding::Gzip),
            "deflate" => Ok(Coding::Deflate),
            "br" => Ok(Coding::Brotli),
            "zstd" => Ok(Coding::Zstd),
            _ => Err(Reason::ContentEncodingInvalid),
        }
    }
}

/// The one content coding `headers` declare, or `None` for the identity.
/// Stacked codings are refused (the safer reading: each layer multiplies
/// what a small body can become), and so is one gatehouse cannot decode.
fn coding(headers: &HeaderMap) -> Result<Option<Coding>, Reason> {
    let mut codings = Vec::new();
    for value in headers.get_all(CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| Reason::ContentEncodingInvalid)?;
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("identity") {
                codings.push(coding);
            }
        }
    }
    match codings.as_slice() {
        [] => Ok(None),
        [one] => Coding::parse(one).map(Some),
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
    let decoded = read_capped(decoder(coding, &body[..])?, cap)?;
    headers.remove(CONTENT_ENCODING);
    Ok(decoded)
}

/// A reader of what `input` decodes to under `coding`.
fn decoder<'a>(coding: Coding, input: impl Read + 'a) -> Result<Box<dyn Read + 'a>, Reason> {
    let mut input = std::io::BufReader::new(input);
    Ok(match coding {
        Coding::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        // RFC 9110 §8.4.1.2: "deflate" is the zlib format; some servers send
        // raw deflate, which a zlib header check tells apart (RFC 1950 §2.2).
        Coding::Deflate => {
            let head = std::io::BufRead::fill_buf(&mut input).map_err(|_| Reason::ContentEncodingInvalid)?;
            if is_zlib_header(head) {
                Box::new(flate2::bufread::ZlibDecoder::new(input))
            } else {
                Box::new(flate2::bufread::DeflateDecoder::new(input))
            }
        }
        Coding::Brotli => Box::new(brotli_decompressor::Decompressor::new(input, CHUNK)),
        Coding::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(input).map_err(|_| Reason::ContentEncodingInvalid)?,
        ),
    })
}

/// As [`decode_body`], for a body still arriving: the decoder runs on a
/// blocking thread between two small channels, so memory stays a few chunks
/// however large the body, and the output is cut off (ending in an error)
/// where it passes `cap`. A coding that cannot be decoded is refused before
/// anything is read.
pub fn decode_stream<B>(headers: &mut HeaderMap, body: B, cap: usize) -> Result<StreamedBody, Reason>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + Send,
{
    let Some(coding) = coding(headers)? else {
        headers.remove(CONTENT_ENCODING);
        return Ok(body.map_err(Into::into).boxed_unsync());
    };
    headers.remove(CONTENT_ENCODING);
    let (input_tx, input_rx) = tokio::sync::mpsc::channel::<Result<Bytes, ()>>(4);
    let (output_tx, output_rx) = tokio::sync::mpsc::channel::<Result<Bytes, Reason>>(4);
    tokio::spawn(async move {
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let sent = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => input_tx.send(Ok(data)).await,
                    Err(_) => continue,
                },
                Err(_) => input_tx.send(Err(())).await,
            };
            if sent.is_err() {
                return;
            }
        }
    });
    tokio::task::spawn_blocking(move || {
        let input = ChannelReader { rx: input_rx, current: Bytes::new() };
        let mut decoder = match decoder(coding, input) {
            Ok(d) => d,
            Err(reason) => {
                let _ = output_tx.blocking_send(Err(reason));
                return;
            }
        };
        let mut total = 0usize;
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let item = match decoder.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) if total + n > cap => Err(Reason::ResponseTooLarge),
                Ok(n) => {
                    total += n;
                    Ok(Bytes::copy_from_slice(&chunk[..n]))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => Err(Reason::ContentEncodingInvalid),
            };
            let last = item.is_err();
            if output_tx.blocking_send(item).is_err() || last {
                return;
            }
        }
    });
    Ok(Decoded(output_rx).boxed_unsync())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streamed body as the fetch client hands it on.
pub type StreamedBody = UnsyncBoxBody<Bytes, BoxError>;

/// The error a decoded stream ends with where it was cut off.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DecodeFailed(pub Reason);

/// The bytes a decoding thread sends, as a body.
struct Decoded(tokio::sync::mpsc::Receiver<Result<Bytes, Reason>>);

impl Body for Decoded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|item| {
            item.map(|r| r.map(Frame::data).map_err(|reason| Box::new(DecodeFailed(reason)) as BoxError))
        })
    }
}

/// A blocking reader over chunks arriving on a channel.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, ()>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(data)) => self.current = data,
                Some(Err(())) => return Err(std::io::ErrorKind::BrokenPipe.into()),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
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
        // 2 MiB of zeros is a few kilobytes of gzip.
        let bomb = gzip(&vec![0u8; 2 << 20]);
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

#[cfg(test)]
mod stream_tests {
    use super::*;
    use http::HeaderValue;
    use std::io::Write as _;

    /// A body of these chunks, as an upstream would deliver them.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn gzip_in_pieces(data: &[u8], piece: usize) -> Chunks {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        let all = e.finish().unwrap();
        Chunks(all.chunks(piece).map(Bytes::copy_from_slice).collect())
    }

    async fn drain(body: StreamedBody) -> (Vec<u8>, Option<String>) {
        let mut body = body;
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => out.extend_from_slice(f.data_ref().unwrap()),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
        (out, None)
    }

    fn gzip_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        h
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_decodes_whatever_its_chunking() {
        let text = b"streamed and decoded ".repeat(5000);
        for piece in [1, 7, 4096] {
            let mut headers = gzip_headers();
            let body = decode_stream(&mut headers, gzip_in_pieces(&text, piece), 1 << 20).unwrap();
            assert!(!headers.contains_key(CONTENT_ENCODING));
            let (out, error) = drain(body).await;
            assert_eq!((out.len(), error), (text.len(), None), "pieces of {piece}");
            assert_eq!(out, text);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_is_cut_off_where_it_decodes_past_the_cap() {
        let pieces = gzip_in_pieces(&vec![0u8; 2 << 20], 1024);
        let body = decode_stream(&mut gzip_headers(), pieces, 128 << 10);
        let (out, error) = drain(body.unwrap()).await;
        assert!(out.len() <= 128 << 10, "{}", out.len());
        assert_eq!(error.as_deref(), Some("response_too_large"));
        let broken = Chunks([Bytes::from_static(b"\x1f\x8b not really")].into());
        let (_, error) = drain(decode_stream(&mut gzip_headers(), broken, 1 << 20).unwrap()).await;
        assert_eq!(error.as_deref(), Some("content_encoding_invalid"));
        let mut unknown = HeaderMap::new();
        unknown.insert(CONTENT_ENCODING, HeaderValue::from_static("compress"));
        assert!(decode_stream(&mut unknown, Chunks(Default::default()), 1).is_err());
    }
}
