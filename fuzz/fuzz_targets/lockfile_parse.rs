//! Every lockfile parser on arbitrary bytes: never panics; a success is
//! sorted, free of duplicates, and has no empty names or versions. The first
//! byte picks the file name, so each parser (and detection by content alone)
//! gets its share.
#![no_main]

use gatehouse_deps::lockfile::parse;
use libfuzzer_sys::fuzz_target;

const NAMES: &[&str] = &[
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "requirements.txt",
    "poetry.lock",
    "go.sum",
    "Cargo.lock",
    "Gemfile.lock",
    "unknown.lock",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, content)) = data.split_first() else { return };
    let name = NAMES[usize::from(pick) % NAMES.len()];
    if let Ok(parsed) = parse(name, content) {
        assert!(parsed.packages.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        assert!(parsed.packages.iter().all(|p| !p.name.is_empty() && !p.version.is_empty()));
    }
});
