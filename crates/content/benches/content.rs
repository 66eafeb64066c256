//! Sniffing throughput on 1 MB and 64 MB inputs — plain text, lines ending
//! in ids, text dense with harmless base64, and binary — beside a `memchr` pass over the same
//! bytes (the speed of a search for one byte: the floor of any scan that
//! must look at everything).
//!
//! `cargo bench -p gatehouse-content --bench content`

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark")]

use base64::Engine as _;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gatehouse_content::sniff_bytes;

const SIZES: [(usize, &str); 2] = [(1 << 20, "1MB"), (64 << 20, "64MB")];

/// Deterministic pseudo-random bytes (xorshift).
fn random(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Prose: words of varying length, punctuation, newlines, some UTF-8.
fn plain_text(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "gatehouse",
        "refuses",
        "executables,",
        "archives",
        "and",
        "anything",
        "that",
        "is",
        "not",
        "text;",
        "naïve",
        "café",
        "résumé",
        "—",
        "it",
        "reads",
        "every",
        "byte",
        "once.",
        "Configuration",
        "of",
        "a",
        "sandbox",
        "(policy)",
        "matters",
        "more",
        "than",
        "its",
        "walls:",
        "12345",
        "✓",
    ];
    let r = random(len / 2 + 64, 7);
    let mut out = Vec::with_capacity(len + 32);
    let mut col = 0;
    let mut i = 0;
    while out.len() < len {
        let w = WORDS[r[i % r.len()] as usize % WORDS.len()];
        i += 1;
        out.extend_from_slice(w.as_bytes());
        col += w.len() + 1;
        if col > 72 {
            out.push(b'\n');
            col = 0;
        } else {
            out.push(b' ');
        }
    }
    out.truncate(len);
    // Do not end inside a UTF-8 sequence.
    while std::str::from_utf8(&out).is_err() {
        out.pop();
    }
    out
}

/// Log-like lines that each end in a 16-character token (an id, a hash):
/// every line starts a candidate run the payload finder must follow and drop.
fn id_lines(len: usize) -> Vec<u8> {
    let line = b"the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnop\n";
    line.iter().copied().cycle().take(len).collect()
}

/// JSON-ish text where most bytes are base64 of random data, some raw and
/// some wrapped at 76 columns.
fn base64_dense(len: usize) -> Vec<u8> {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::with_capacity(len + 70_000);
    let mut seed = 1;
    while out.len() < len {
        let blob = engine.encode(random(12_000, seed));
        seed += 1;
        out.extend_from_slice(b"{\"name\": \"attachment\", \"data\": \"");
        out.extend_from_slice(blob.as_bytes());
        out.extend_from_slice(b"\"}\n-----BEGIN DATA-----\n");
        for line in blob.as_bytes().chunks(76) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END DATA-----\n");
    }
    out.truncate(len);
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("sniff");
    group.sample_size(10);
    for (size, label) in SIZES {
        let inputs = [
            ("plain_text", plain_text(size)),
            ("id_lines", id_lines(size)),
            ("base64_dense", base64_dense(size)),
            ("binary", random(size, 99)),
        ];
        for (name, input) in &inputs {
            group.throughput(Throughput::Bytes(input.len() as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("gatehouse/{name}"), label),
                input,
                |b, input| b.iter(|| sniff_bytes(std::hint::black_box(input), u64::MAX)),
            );
            if size == 1 << 20 {
                // The two passes text gets, apart.
                group.bench_with_input(
                    BenchmarkId::new(format!("text_only/{name}"), label),
                    input,
                    |b, input| b.iter(|| gatehouse_content::text::validate(std::hint::black_box(input))),
                );
                group.bench_with_input(
                    BenchmarkId::new(format!("payloads_only/{name}"), label),
                    input,
                    |b, input| b.iter(|| gatehouse_content::embedded::find(std::hint::black_box(input))),
                );
            }
            group.bench_with_input(BenchmarkId::new(format!("memchr/{name}"), label), input, |b, input| {
                b.iter(|| memchr::memchr_iter(0, std::hint::black_box(input)).count())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
