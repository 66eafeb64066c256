//! Version parsing and ordering in every scheme on arbitrary text: never
//! panics, and the order is a total order (antisymmetric, consistent with
//! equality), which the matcher's sorted tables rely on. Numbers of any
//! length must parse where the scheme allows them.
#![no_main]

use std::cmp::Ordering;

use gatehouse_deps::version::Scheme;
use libfuzzer_sys::fuzz_target;

const SCHEMES: [Scheme; 5] = [Scheme::SemVer, Scheme::Npm, Scheme::Go, Scheme::Pep440, Scheme::RubyGems];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let scheme = SCHEMES[usize::from(pick) % SCHEMES.len()];
    let (a, b) = text.split_once('\n').unwrap_or((text, text));
    let (Ok(x), Ok(y)) = (scheme.parse(a), scheme.parse(b)) else { return };
    assert_eq!(x.cmp(&y), y.cmp(&x).reverse());
    assert_eq!(x.cmp(&y) == Ordering::Equal, x == y);
    assert_eq!(x.cmp(&x), Ordering::Equal);
});
