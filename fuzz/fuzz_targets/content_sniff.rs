//! Content sniffing on arbitrary bytes: never panics, and streaming the
//! content in chunks (sizes taken from the first byte) gives the verdict of
//! sniffing it whole.
#![no_main]

use gatehouse_content::{Sniffer, sniff_bytes};
use libfuzzer_sys::fuzz_target;

const CAP: u64 = 1 << 30;

fuzz_target!(|data: &[u8]| {
    let Some((&pattern, content)) = data.split_first() else { return };
    let whole = sniff_bytes(content, CAP);
    // Chunk sizes 1..=16, cycling through a pattern picked by the first byte.
    let sizes = [usize::from(pattern & 0x0f) + 1, usize::from(pattern >> 4) + 1];
    let mut sniffer = Sniffer::new(CAP);
    let mut rest = content;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at((*size).min(rest.len()));
        sniffer.update(chunk);
        rest = tail;
    }
    assert_eq!(sniffer.finish(), whole, "chunked and whole sniffing disagree");
});
