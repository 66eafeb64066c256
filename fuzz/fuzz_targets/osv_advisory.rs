//! OSV advisories from an untrusted database or API answer: loading never
//! panics, and matching any package against what loaded never panics either.
#![no_main]

use gatehouse_deps::matching::Index;
use gatehouse_deps::Package;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(advisory) = gatehouse_deps::osv::from_json_bytes("fuzz.json", data) else { return };
    let names: Vec<(String, String)> = advisory
        .affected
        .iter()
        .filter_map(|a| a.package.as_ref().map(|p| (p.ecosystem.clone(), p.name.clone())))
        .collect();
    let index = Index::new(vec![advisory]);
    for (ecosystem, name) in names {
        let Some(ecosystem) = gatehouse_deps::matching::ecosystem_from_osv(&ecosystem) else { continue };
        for version in ["0", "1.0.0", "v1.2.3", "2.0.0rc1", "1.0.0-alpha", "v0.0.0-20200101000000-abcdef123456"] {
            let _ = index.evaluate(&Package::new(ecosystem, &name, version));
        }
    }
});
