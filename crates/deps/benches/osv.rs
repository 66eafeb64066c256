//! OSV matching over the real advisory set in `shared/osv` (8,230 files,
//! 18.5 MB): loading and indexing it, then matching 10,000 packages drawn
//! from the advisories' own affected names and their event and `versions`
//! versions, sampled two ways (see `sample_by_mention`, `sample_by_name`).
//!
//! `cargo bench -p gatehouse-deps --bench osv`
//!
//! The set is read from `../../../shared/osv` relative to this crate (or from
//! `GATEHOUSE_OSV_DIR`); without it the bench says so and does nothing.
//! Targets: load + index ≤ 2 s, matching 10,000 packages ≤ 50 ms.

#![allow(missing_docs, clippy::unwrap_used, clippy::print_stdout, reason = "benchmark")]

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::Criterion;
use gatehouse_deps::matching::{Index, ecosystem_from_osv};
use gatehouse_deps::osv::{self, Event, RangeType};
use gatehouse_deps::{Ecosystem, Package};

const PACKAGES: usize = 10_000;

fn osv_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("GATEHOUSE_OSV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/osv"));
    dir.is_dir().then_some(dir)
}

/// Every (ecosystem, name, version) the advisories mention through a
/// non-GIT event or a `versions` entry, in advisory order. Names with many
/// advisories (tensorflow: ~18,000 mentions) dominate it.
fn mentions(index: &Index) -> Vec<Package> {
    let mut all = Vec::new();
    for a in index.advisories() {
        for affected in &a.affected {
            let Some(p) = &affected.package else { continue };
            let Some(eco) = ecosystem_from_osv(&p.ecosystem) else { continue };
            let go = |v: &str| if eco == Ecosystem::Go { format!("v{v}") } else { v.to_owned() };
            for r in affected.ranges.iter().filter(|r| r.kind != RangeType::Git) {
                for e in &r.events {
                    if let Event::Introduced(v) | Event::Fixed(v) | Event::LastAffected(v) = e
                        && v != "0"
                    {
                        all.push(Package::new(eco, &p.name, &go(v)));
                    }
                }
            }
            for v in &affected.versions {
                all.push(Package::new(eco, &p.name, &go(v)));
            }
        }
    }
    assert!(!all.is_empty());
    all
}

/// Every k-th mention, up to `PACKAGES`: weighted by how often a name is
/// mentioned, so the heavily advised names (hundreds of entries each) are
/// most of the work. The harder of the two samples.
fn sample_by_mention(index: &Index) -> Vec<Package> {
    let all = mentions(index);
    let step = (all.len() / PACKAGES).max(1);
    all.into_iter().step_by(step).cycle().take(PACKAGES).collect()
}

/// Round robin over the names, each name's distinct versions in turn, up to
/// `PACKAGES`: closer to a lockfile, where each package appears once.
fn sample_by_name(index: &Index) -> Vec<Package> {
    let mut by_name: BTreeMap<(Ecosystem, String), BTreeSet<String>> = BTreeMap::new();
    for p in mentions(index) {
        by_name.entry((p.ecosystem, p.name)).or_default().insert(p.version);
    }
    let lists: Vec<_> = by_name.into_iter().map(|(k, v)| (k, v.into_iter().collect::<Vec<_>>())).collect();
    let mut out = Vec::with_capacity(PACKAGES);
    for round in 0.. {
        let before = out.len();
        for ((eco, name), versions) in &lists {
            if let Some(v) = versions.get(round) {
                out.push(Package::new(*eco, name, v));
                if out.len() == PACKAGES {
                    return out;
                }
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

fn timed_pass(index: &Index, label: &str, packages: &[Package]) {
    let (mut hits, mut errors) = (0usize, 0usize);
    let start = Instant::now();
    for p in packages {
        let e = index.evaluate(p);
        hits += e.affected.len();
        errors += e.errors.len();
    }
    println!(
        "osv bench: {label}: matched {} packages in {:.2} ms ({hits} advisory hits, {errors} undecidable)",
        packages.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
}

fn main() {
    let Some(dir) = osv_dir() else {
        println!("osv bench: no advisory set at ../../../shared/osv (or GATEHOUSE_OSV_DIR); skipped");
        return;
    };

    // One timed load outside criterion, printed on its own.
    let start = Instant::now();
    let advisories = osv::load_dir(&dir).unwrap();
    let loaded = start.elapsed();
    let count = advisories.len();
    let start = Instant::now();
    let index = Index::new(advisories);
    let indexed = start.elapsed();
    println!(
        "osv bench: {count} advisories from {}: load_dir {:.0} ms, Index::new {:.0} ms, total {:.0} ms \
         ({} package names, {} withdrawn)",
        dir.display(),
        loaded.as_secs_f64() * 1e3,
        indexed.as_secs_f64() * 1e3,
        (loaded + indexed).as_secs_f64() * 1e3,
        index.package_names(),
        index.withdrawn(),
    );

    let by_mention = sample_by_mention(&index);
    let by_name = sample_by_name(&index);
    timed_pass(&index, "by mention", &by_mention);
    timed_pass(&index, "by name", &by_name);

    let mut c = Criterion::default().configure_from_args();
    for (label, packages) in [("match_10k_by_mention", &by_mention), ("match_10k_by_name", &by_name)] {
        c.bench_function(&format!("osv/{label}"), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for p in packages {
                    n += index.evaluate(black_box(p)).affected.len();
                }
                n
            })
        });
    }
    let mut group = c.benchmark_group("osv_load");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.bench_function("load_dir", |b| b.iter(|| osv::load_dir(black_box(&dir)).unwrap().len()));
    let advisories = osv::load_dir(&dir).unwrap();
    group.bench_function("index_new", |b| {
        b.iter_batched(|| advisories.clone(), |a| Index::new(a).len(), criterion::BatchSize::LargeInput)
    });
    group.finish();
    c.final_summary();
}
