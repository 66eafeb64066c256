//! Egress presets: the hosts a common kind of tool needs, kept as reviewed
//! data in `presets/egress-presets.json` (each with the documentation that
//! names its hosts) and compiled into the binary, so a policy's meaning never
//! depends on a file beside it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The reviewed file.
const PRESETS_JSON: &str = include_str!("../../presets/egress-presets.json");

/// One preset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// How a policy names it: `{"preset": NAME}`.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Where its hosts come from.
    pub sources: Vec<String>,
    /// Its host entries.
    pub entries: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    #[serde(rename = "about")]
    _about: String,
    presets: Vec<Preset>,
}

/// Every preset, in the file's order. The file is checked by this crate's
/// tests; one that did not read would leave no preset, so every policy
/// naming one is unreadable (closed), never open.
pub fn all() -> &'static [Preset] {
    static PRESETS: OnceLock<Vec<Preset>> = OnceLock::new();
    PRESETS.get_or_init(|| {
        serde_json::from_str::<PresetFile>(PRESETS_JSON).map(|f| f.presets).unwrap_or_default()
    })
}

/// The preset `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    all().iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reviewed_file_reads_and_every_entry_is_a_host_entry() {
        let file: PresetFile = serde_json::from_str(PRESETS_JSON).unwrap();
        let names: Vec<&str> = file.presets.iter().map(|p| p.name.as_str()).collect();
        for needed in ["package-registries", "github", "debian"] {
            assert!(names.contains(&needed), "{needed}");
        }
        for preset in all() {
            assert!(!preset.entries.is_empty() && !preset.sources.is_empty(), "{}", preset.name);
            for entry in &preset.entries {
                let host = super::super::HostRule::parse(entry);
                assert!(host.is_ok(), "{}: {entry}: {host:?}", preset.name);
                assert!(!entry.starts_with("*."), "{}: a preset names exact hosts: {entry}", preset.name);
            }
        }
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }
}
