//! The answer scrubber's throughput: today's (every window of 8+ bytes of a
//! secret form, one suffix-automaton pass) beside the one it replaced (whole
//! secret forms only, one Knuth–Morris–Pratt matcher per form), on the same
//! 1 MiB and 16 MiB bodies in 16 KiB chunks, with a raw secret and its Basic
//! form to find: JSON-like text that echoes the secret now and then, and
//! random bytes.
//!
//! `cargo bench -p gatehouse-egress --bench scrub`

#![allow(missing_docs, clippy::unwrap_used, clippy::indexing_slicing, reason = "benchmark")]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gatehouse_egress::inject::{Delivery, InjectRule, LeaseEntry, LeaseState, apply, placeholder_for};

const SECRET: &[u8] = b"ghp_Q7x2Lm9Vt4Rk8Wz3Np6Yb1Hc5Jd0FsA1b2";
const CHUNK: usize = 16 << 10;

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

/// An API's JSON answers, one in 64 echoing the secret.
fn json_text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    let mut i = 0u64;
    while out.len() < len {
        i += 1;
        out.extend_from_slice(
            format!("{{\"id\":{i},\"name\":\"repo-{i}\",\"url\":\"https://api.example/r/{i}\",").as_bytes(),
        );
        if i.is_multiple_of(64) {
            out.extend_from_slice(b"\"token\":\"");
            out.extend_from_slice(SECRET);
            out.extend_from_slice(b"\",");
        }
        out.extend_from_slice(b"\"private\":false}\n");
    }
    out.truncate(len);
    out
}

/// A live lease for a Basic rule (git's `x-access-token`).
fn basic_lease() -> LeaseEntry {
    let lease_id = "lease_0123456789abcdef0123456789abcdef";
    LeaseEntry {
        lease_id: lease_id.to_owned(),
        placeholder: placeholder_for(lease_id).unwrap(),
        host: "api.example".to_owned(),
        granted_at: 0,
        state: LeaseState::Live { expires_at: i64::MAX },
        delivery: Delivery::Inject(InjectRule::basic("x-access-token").unwrap()),
        allow_plain_http: false,
    }
}

/// The pairs the previous scrubber took for the same injection: the secret
/// and its Basic form as sent.
fn pairs(entry: &LeaseEntry) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut headers = http::HeaderMap::new();
    apply(&mut headers, entry, SECRET).unwrap();
    let sent = headers[http::header::AUTHORIZATION].to_str().unwrap().trim_start_matches("Basic ").to_owned();
    vec![(SECRET.to_vec(), entry.placeholder.clone().into_bytes()), (sent.into_bytes(), b"known".to_vec())]
}

fn scrub(c: &mut Criterion) {
    let entry = basic_lease();
    let today = apply(&mut http::HeaderMap::new(), &entry, SECRET).unwrap();
    let pairs = pairs(&entry);
    let mut group = c.benchmark_group("scrub");
    for (size, label) in [(1usize << 20, "1MiB"), (16 << 20, "16MiB")] {
        for (input, body) in [("json", json_text(size)), ("random", random(size, 0x9e37_79b9_7f4a_7c15))] {
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_with_input(BenchmarkId::new(format!("windows/{input}"), label), &body, |b, body| {
                b.iter(|| {
                    let mut scrubber = today.stream();
                    let mut out = 0;
                    for chunk in body.chunks(CHUNK) {
                        out += scrubber.push(chunk).len();
                    }
                    out + scrubber.finish().len()
                });
            });
            group.bench_with_input(BenchmarkId::new(format!("whole/{input}"), label), &body, |b, body| {
                b.iter(|| {
                    let mut scrubber = previous::Scrubber::new(&pairs);
                    let mut out = 0;
                    for chunk in body.chunks(CHUNK) {
                        out += scrubber.push(chunk).len();
                    }
                    out + scrubber.finish().len()
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, scrub);
criterion_main!(benches);

/// The scrubber this one replaced (gatehouse before #26), as it was, for the
/// comparison only: whole secret forms, leftmost then longest.
mod previous {
    use std::collections::VecDeque;

    use bytes::Bytes;

    struct Pattern {
        secret: Vec<u8>,
        placeholder: Vec<u8>,
        /// `fail[i]`: the length of the longest proper prefix of
        /// `secret[..=i]` that is also its suffix.
        fail: Vec<usize>,
        /// How many bytes of `secret` the stream read so far ends with.
        state: usize,
        /// Stream offsets where an occurrence starts, ascending, not yet passed
        /// by the decided offset. Overlapping occurrences are all here; which
        /// of them is replaced is decided in [`Scrubber::decide`].
        starts: VecDeque<u64>,
    }

    impl Pattern {
        fn new(secret: &[u8], placeholder: &[u8]) -> Self {
            let mut fail = vec![0; secret.len()];
            let mut k = 0;
            for i in 1..secret.len() {
                while k > 0 && secret[i] != secret[k] {
                    k = fail[k - 1];
                }
                if secret[i] == secret[k] {
                    k += 1;
                }
                fail[i] = k;
            }
            Self {
                secret: secret.to_vec(),
                placeholder: placeholder.to_vec(),
                fail,
                state: 0,
                starts: VecDeque::new(),
            }
        }

        /// Reads one byte, the stream then being `end` bytes long.
        fn feed(&mut self, byte: u8, end: u64) {
            let mut q = self.state;
            while q > 0 && self.secret.get(q) != Some(&byte) {
                q = self.fail.get(q - 1).copied().unwrap_or(0);
            }
            if self.secret.get(q) == Some(&byte) {
                q += 1;
            }
            if q == self.secret.len() {
                self.starts.push_back(end - q as u64);
                q = self.fail.get(q - 1).copied().unwrap_or(0);
            }
            self.state = q;
        }
    }

    /// Replaces secret forms in a body that arrives in chunks.
    ///
    /// The output is byte-identical to replacing in the whole body at once,
    /// scanning left to right: the leftmost occurrence wins, and among
    /// occurrences at the same offset the longest; replaced bytes are not looked
    /// at again. To find a secret split across chunks it holds back at most
    /// `longest - 1` bytes between chunks (only what could still begin a
    /// secret form), emitted by [`Scrubber::finish`]. Each byte is read once per
    /// pair, so a chunk costs O(chunk × pairs), whatever was held.
    pub struct Scrubber {
        patterns: Vec<Pattern>,
        longest: usize,
        /// The stream's bytes from offset `held_at` on (some already decided).
        held: Vec<u8>,
        held_at: u64,
        /// Every byte before this offset has been written out (as itself or as
        /// part of a replaced occurrence).
        decided: u64,
        /// How many bytes have been pushed.
        seen: u64,
    }

    impl Scrubber {
        /// A scrubber of these (secret form, placeholder) pairs.
        pub fn new(pairs: &[(Vec<u8>, Vec<u8>)]) -> Self {
            let patterns: Vec<Pattern> = pairs.iter().map(|(s, p)| Pattern::new(s, p)).collect();
            let longest = pairs.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
            Self { longest, patterns, held: Vec::new(), held_at: 0, decided: 0, seen: 0 }
        }

        /// Reads the next chunk; returns what can be passed on now.
        pub fn push(&mut self, chunk: &[u8]) -> Bytes {
            if self.patterns.is_empty() {
                return Bytes::copy_from_slice(chunk);
            }
            let mut out = Vec::with_capacity(chunk.len() + self.held.len());
            self.held.extend_from_slice(chunk);
            for &byte in chunk {
                self.seen += 1;
                for pattern in &mut self.patterns {
                    pattern.feed(byte, self.seen);
                }
                self.decide(&mut out, false);
            }
            let done = usize::try_from(self.decided - self.held_at).unwrap_or(self.held.len());
            self.held.drain(..done.min(self.held.len()));
            self.held_at = self.decided;
            out.into()
        }

        /// Ends the stream: returns the bytes still held, scrubbed.
        pub fn finish(mut self) -> Bytes {
            let mut out = Vec::with_capacity(self.held.len());
            self.decide(&mut out, true);
            out.into()
        }

        /// Writes out every offset that can be decided: one where every pattern
        /// that could start there has been read to its end (or, at the end of
        /// the stream, every offset left).
        fn decide(&mut self, out: &mut Vec<u8>, at_end: bool) {
            while self.decided < self.seen && (at_end || self.decided + self.longest as u64 <= self.seen) {
                let at = self.decided;
                let mut best: Option<(usize, usize)> = None;
                for (k, pattern) in self.patterns.iter_mut().enumerate() {
                    while pattern.starts.front().is_some_and(|&start| start < at) {
                        pattern.starts.pop_front();
                    }
                    let len = pattern.secret.len();
                    if pattern.starts.front() == Some(&at) && best.is_none_or(|(_, l)| len > l) {
                        best = Some((k, len));
                    }
                }
                match best.and_then(|(k, len)| Some((self.patterns.get(k)?, len))) {
                    Some((pattern, len)) => {
                        out.extend_from_slice(&pattern.placeholder);
                        self.decided += len as u64;
                    }
                    None => {
                        let offset = usize::try_from(at - self.held_at).unwrap_or(usize::MAX);
                        let Some(&byte) = self.held.get(offset) else { return };
                        out.push(byte);
                        self.decided += 1;
                    }
                }
            }
        }
    }
}
