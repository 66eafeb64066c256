//! The embedded-payload finder on arbitrary text: never panics, and feeding
//! it in chunks (sizes taken from the first byte) finds what it finds in the
//! whole text, at the same offset, and the fast skim finds what the
//! reference finder (no skim) finds.
#![no_main]

use gatehouse_content::embedded::{self, PayloadFinder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pattern, text)) = data.split_first() else { return };
    let whole = embedded::find(text);
    let sizes = [usize::from(pattern & 0x0f) + 1, usize::from(pattern >> 4) + 1];
    let mut finder = PayloadFinder::new();
    let mut rest = text;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at((*size).min(rest.len()));
        finder.update(chunk);
        rest = tail;
    }
    assert_eq!(finder.finish(), whole, "chunked and whole search disagree");
    let mut reference = PayloadFinder::reference();
    reference.update(text);
    assert_eq!(reference.finish(), whole, "the skim and the reference disagree");
    if let Some(p) = whole {
        assert!(p.offset < text.len() as u64, "offset {} past the end", p.offset);
    }
});
