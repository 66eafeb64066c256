//! Every lockfile parser on arbitrary bytes: never panics; a success is
//! sorted, free of duplicates, has no empty names, and every commit is a
//! commit id; a failure names the file and a line inside it (lines end at
//! LF, and in the YAML formats at a lone CR too). The first byte
//! picks the file name, so each parser (and detection by content alone) gets
//! its share.
#![no_main]

use gatehouse_deps::lockfile::parse;
use gatehouse_deps::package::is_commit;
use libfuzzer_sys::fuzz_target;

const NAMES: &[&str] = &[
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "requirements.txt",
    "poetry.lock",
    "go.sum",
    "go.mod",
    "Cargo.lock",
    "Gemfile.lock",
    "unknown.lock",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, content)) = data.split_first() else { return };
    let name = NAMES[usize::from(pick) % NAMES.len()];
    match parse(name, content) {
        Ok(parsed) => {
            assert!(parsed.packages.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
            for p in &parsed.packages {
                assert!(!p.name.is_empty());
                // Empty only for an entry with no version (a git dependency or a URL).
                assert!(!p.version.contains(['\n', '\0']));
                assert!(p.commit.as_deref().is_none_or(is_commit));
            }
        }
        Err(e) => {
            assert_eq!(e.file, name);
            // YAML (pnpm, yarn Berry, either found by content) ends a line
            // at a lone CR too (YAML 1.2 §5.4); every other format at LF only.
            let yaml = matches!(name, "pnpm-lock.yaml" | "yarn.lock" | "unknown.lock");
            let lone_cr = if yaml {
                content.windows(2).filter(|w| w[0] == b'\r' && w[1] != b'\n').count()
                    + usize::from(content.last() == Some(&b'\r'))
            } else {
                0
            };
            let lines = content.iter().filter(|&&b| b == b'\n').count() + lone_cr + 1;
            assert!(e.line.is_none_or(|l| (1..=lines).contains(&l)));
        }
    }
});
