//! The npm, yarn and pnpm lockfile parsers: real lockfiles from public
//! repositories (`tests/fixtures/{npm,yarn,pnpm}/`, copied byte for byte from
//! the shared fixture set, original file names kept so detection by name is
//! exercised), hand-written edge cases, malformed and hostile input, and
//! property tests that nothing panics.
//!
//! The expected counts and entries were not taken from these parsers' output.
//! They come from short independent Python readings of each fixture (the
//! standard library's `json` and PyYAML's `yaml.safe_load`, plus regexes for
//! yarn v1), applying the documented rules and counting the distinct
//! (name, version) pairs:
//!
//! - npm v2/v3: every `packages` key containing `node_modules/`, minus
//!   `link: true`, `file:` and git-resolved entries; name = the `name` field or
//!   the text after the last `node_modules/`. npm v1: walk `dependencies`
//!   recursively, `npm:real@v` versions under the real name, a registry
//!   tarball URL version `/<name>/-/<name>-<v>.tgz` read as `<v>`, git and
//!   `file:` versions left out.
//! - yarn v1: blocks split on blank lines, descriptors from the header, alias
//!   targets after `@npm:`, `version`/`resolved` by regex. Berry: `resolution`
//!   split at the name's `@`, `patch:` unwrapped with `urllib.parse.unquote`,
//!   only `npm:` kept. (Cross-check by grep: prettier-berry-v6 has 888
//!   `resolution:` lines, minus 1 `workspace:`, minus 4 `patch:` twins of npm
//!   entries, = 883.)
//! - pnpm: `packages` keys, `/name/ver` (5.x) or `[/]name@ver` (6.x, 9.x) by
//!   regex, peer suffix (`_...`, `(...)`) dropped, the entry's `name`/`version`
//!   fields preferred.

use std::time::{Duration, Instant};

use gatehouse_deps::{Ecosystem, Format, ParseError, ParseErrorCode, Parsed, parse};

fn fixture(rel: &str) -> Parsed {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse(&path, &bytes).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn ok(name: &str, text: &str) -> Parsed {
    parse(name, text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
}

fn err(name: &str, text: &str) -> ParseError {
    match parse(name, text.as_bytes()) {
        Ok(p) => panic!("{name}: parsed {} packages from\n{text}", p.packages.len()),
        Err(e) => e,
    }
}

/// The versions of `name`, sorted.
fn versions<'a>(p: &'a Parsed, name: &str) -> Vec<&'a str> {
    p.packages.iter().filter(|pk| pk.name == name).map(|pk| pk.version.as_str()).collect()
}

#[track_caller]
fn assert_versions(p: &Parsed, expected: &[(&str, &[&str])]) {
    for (name, want) in expected {
        assert_eq!(versions(p, name), *want, "versions of {name}");
    }
}

#[track_caller]
fn assert_absent(p: &Parsed, names: &[&str]) {
    for name in names {
        assert!(versions(p, name).is_empty(), "{name} should not be listed: {:?}", versions(p, name));
    }
}

#[track_caller]
fn assert_lacks(p: &Parsed, entries: &[(&str, &str)]) {
    for (name, version) in entries {
        assert!(!versions(p, name).contains(version), "{name}@{version} should not be listed");
    }
}

/// Invariants of every successful parse.
#[track_caller]
fn assert_clean(p: &Parsed, format: Format, count: usize) {
    assert_eq!(p.format, format);
    assert_eq!(p.packages.len(), count, "package count");
    let mut sorted = p.packages.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, p.packages, "sorted and unique");
    for pk in &p.packages {
        assert_eq!(pk.ecosystem, Ecosystem::Npm);
        assert!(!pk.name.is_empty());
        let v = &pk.version;
        // Empty for no version (a git dependency or a URL); else as written,
        // with no peer suffix, URL or alias left in it.
        assert!(!v.contains(['(', '_', ':', '/', ' ', '@']), "{}@{v}: not a plain version", pk.name);
    }
}

/// `name` is listed once, as a git dependency at `version` and `commit`.
#[track_caller]
fn assert_git(p: &Parsed, name: &str, version: &str, commit: Option<&str>) {
    let found: Vec<_> = p.packages.iter().filter(|pk| pk.name == name).collect();
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    assert_eq!((found[0].version.as_str(), found[0].commit.as_deref()), (version, commit), "{name}");
}

fn warning_codes(p: &Parsed) -> Vec<&'static str> {
    p.warnings.iter().map(|w| w.code).collect()
}

// ---------------------------------------------------------------- npm fixtures

#[test]
fn npm_checkout_v1_nested_and_bundled() {
    let p = fixture("npm/checkout-v1/package-lock.json");
    assert_clean(&p, Format::NpmPackageLock, 647);
    assert_versions(
        &p,
        &[
            ("@actions/core", &["1.1.3"]),
            ("@babel/code-frame", &["7.5.5"]),         // dev
            ("@babel/generator", &["7.7.2", "7.7.4"]), // top level and nested under @babel/core
            ("fsevents", &["1.2.9"]),                  // optional
            ("abbrev", &["1.1.1"]),                    // only bundled inside fsevents
            ("chownr", &["1.1.1"]),                    // only bundled inside fsevents
            ("minimist", &["0.0.8", "1.2.0"]),
            ("ms", &["2.0.0", "2.1.1", "2.1.2"]),
            ("semver", &["5.5.0", "5.7.0", "5.7.1", "6.3.0"]),
            ("tunnel", &["0.0.4", "0.0.6"]),
            ("typescript", &["3.6.4"]),
            ("nan", &["2.14.0"]),
        ],
    );
    assert_absent(&p, &["checkout"]); // the root project
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_nightscout_shrinkwrap_v1() {
    let p = fixture("npm/nightscout-shrinkwrap-v1/npm-shrinkwrap.json");
    assert_clean(&p, Format::NpmShrinkwrap, 1142);
    assert_versions(
        &p,
        &[
            ("@babel/core", &["7.11.4"]),
            ("abab", &["1.0.4", "2.0.4"]),
            ("bindings", &["1.5.0"]),
            ("express", &["4.17.1"]),
            ("fsevents", &["1.2.13", "2.1.3"]),
            ("mongodb", &["3.6.0"]),
            ("ms", &["2.0.0", "2.1.1", "2.1.2"]),
            ("pkg-dir", &["1.0.0", "3.0.0", "4.2.0"]),
            ("tough-cookie", &["2.4.3", "2.5.0", "4.0.0"]),
            // Its `version` is the registry tarball URL .../node-uuid/-/node-uuid-1.4.7.tgz.
            ("node-uuid", &["1.4.7"]),
        ],
    );
    // `http2` is a GitHub archive tarball of a tag: a git dependency with
    // neither a version nor a commit, listed so that the scan reports it.
    assert_git(&p, "http2", "", None);
    assert_absent(&p, &["nightscout"]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_dependency_review_action_v2() {
    let p = fixture("npm/dependency-review-action-v2/package-lock.json");
    assert_clean(&p, Format::NpmPackageLock, 570);
    assert_versions(
        &p,
        &[
            ("@actions/core", &["1.9.1"]),
            ("@actions/github", &["5.1.0"]),
            ("@octokit/core", &["3.6.0"]),
            ("debug", &["2.6.9", "3.2.7", "4.3.4"]),
            ("jest", &["27.5.1"]),
            ("minimatch", &["3.1.2"]),
            ("ms", &["2.0.0", "2.1.2"]),
            ("semver", &["5.7.1", "6.3.0", "7.0.0", "7.3.5", "7.3.7"]),
            ("typescript", &["4.8.3"]),
            ("zod", &["3.19.1"]),
        ],
    );
    assert_lacks(&p, &[("dependency-review-action", "2.4.0")]);
}

#[test]
fn npm_dependency_review_action_v3_aliases_and_peers() {
    let p = fixture("npm/dependency-review-action-v3/package-lock.json");
    assert_clean(&p, Format::NpmPackageLock, 732);
    assert_versions(
        &p,
        &[
            // node_modules/string-width-cjs has `name: string-width`, version 4.2.3.
            ("string-width", &["4.2.3", "5.1.2"]),
            ("strip-ansi", &["6.0.1", "7.1.2"]),
            ("wrap-ansi", &["7.0.0", "8.1.0"]),
            ("js-yaml", &["3.14.2", "4.1.1"]),
            ("spdx-expression-parse", &["3.0.1", "4.0.0"]),
            ("@actions/core", &["1.11.1", "2.0.1"]),
            ("typescript", &["3.9.10", "5.4.5", "5.9.2"]),
            ("fsevents", &["2.3.3"]),            // optional
            ("esbuild", &["0.25.0"]),            // dev + peer
            ("@esbuild/linux-x64", &["0.25.0"]), // dev + optional + peer
            ("@pkgjs/parseargs", &["0.11.0"]),
            ("zod", &["3.24.1"]),
        ],
    );
    assert_absent(&p, &["string-width-cjs", "strip-ansi-cjs", "wrap-ansi-cjs", "dependency-review-action"]);
    assert!(p.warnings.is_empty());
}

#[test]
fn npm_btc_rpc_explorer_shrinkwrap_v2_git_deps() {
    let p = fixture("npm/btc-rpc-explorer-shrinkwrap-v2/npm-shrinkwrap.json");
    assert_clean(&p, Format::NpmShrinkwrap, 498);
    assert_versions(
        &p,
        &[
            // 0.26.1 sits in node_modules/@janoside/app-utils/node_modules: a registry
            // package inside a git dependency is still a registry package.
            ("axios", &["0.26.1", "0.27.2"]),
            ("bech32", &["1.1.4", "2.0.0"]),
            ("debug", &["2.6.9", "4.3.4"]),
            ("dotenv", &["10.0.0", "16.0.1"]),
            ("@babel/parser", &["7.17.12"]),
        ],
    );
    // Git-resolved, listed under the version npm records with the commit of
    // `resolved`: @janoside/app-utils 1.0.0, electrum-client 1.1.7 and
    // node_modules/btc-rpc-client (name bitcoin-core 3.0.0).
    assert_git(&p, "@janoside/app-utils", "1.0.0", Some("ed4c9740804e660dd4475cd36d6c1daf0c8e2d9d"));
    assert_git(&p, "electrum-client", "1.1.7", Some("d98e929028d2b05c88a41fe37652737912bead79"));
    assert_git(&p, "bitcoin-core", "3.0.0", Some("8ed164d9ea4964d5c059084f48818b1a14bf86c9"));
    assert_absent(&p, &["btc-rpc-client", "btc-rpc-explorer"]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_btc_rpc_explorer_shrinkwrap_v3() {
    let p = fixture("npm/btc-rpc-explorer-shrinkwrap-v3/npm-shrinkwrap.json");
    assert_clean(&p, Format::NpmShrinkwrap, 547);
    assert_versions(
        &p,
        &[
            ("axios", &["1.11.0"]),
            ("bech32", &["2.0.0"]),
            ("debug", &["2.6.9", "4.4.1"]),
            ("dotenv", &["13.0.1", "16.6.1"]),
            ("express", &["4.21.2"]),
            ("ms", &["2.0.0", "2.1.3"]),
            ("@babel/parser", &["7.28.0"]),
        ],
    );
    assert_git(&p, "@janoside/app-utils", "1.0.0", Some("ba4c23d3fcfb5d6eb9f5de951bf47e046e03b281"));
    assert_git(&p, "electrum-client", "1.1.7", Some("d98e929028d2b05c88a41fe37652737912bead79"));
    assert_absent(&p, &["btc-rpc-explorer"]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_workspaces_and_links() {
    let p = fixture("npm/workspaces-languageservices/package-lock.json");
    assert_clean(&p, Format::NpmPackageLock, 921);
    assert_versions(
        &p,
        &[
            // expressions/node_modules/js-yaml 4.1.1, languageserver/node_modules/js-yaml 4.1.0:
            // registry packages installed inside workspace folders.
            ("js-yaml", &["3.14.2", "4.1.0", "4.1.1"]),
            ("@octokit/core", &["5.2.2", "6.1.5"]),
            ("@octokit/openapi-types", &["18.1.1", "24.2.0", "25.0.0"]),
        ],
    );
    // Workspace folders (`expressions`, ...), their `link: true` entries under
    // node_modules/@actions/, and the root; a git dev dependency is listed.
    assert_absent(
        &p,
        &[
            "@actions/expressions",
            "@actions/workflow-parser",
            "@actions/languageserver",
            "@actions/languageservice",
            "actions-languageservices",
        ],
    );
    assert_git(&p, "rest-api-description", "1.0.0", Some("5e28810649ba41b5483753ba74f976f83856a504"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_nested_node_modules_duplicates() {
    let p = fixture("npm/nested-node-modules/package-lock.json");
    assert_clean(&p, Format::NpmPackageLock, 730);
    assert_versions(
        &p,
        &[
            // 4.0.0 at the top, 3.0.1 under three nested node_modules paths: once each.
            ("spdx-expression-parse", &["3.0.1", "4.0.0"]),
            ("@types/spdx-expression-parse", &["3.0.5"]),
            ("@onebeyond/spdx-license-satisfies", &["1.0.1"]),
            ("spdx-satisfies", &["6.0.0"]),
            ("@actions/core", &["1.11.1", "2.0.1"]),
        ],
    );
}

// --------------------------------------------------------------- yarn fixtures

#[test]
fn yarn_v1_prettier() {
    let p = fixture("yarn/prettier-v1/yarn.lock");
    assert_clean(&p, Format::YarnV1, 828);
    assert_versions(
        &p,
        &[
            ("@babel/code-frame", &["7.0.0", "7.16.7"]),
            ("@babel/core", &["7.17.9"]),
            ("esbuild", &["0.14.38"]),
            ("ms", &["2.0.0", "2.1.2", "2.1.3"]),
            ("prettier", &["2.6.2"]),
            ("semver", &["5.7.1", "6.3.0", "7.3.5", "7.3.7"]),
            ("typescript", &["4.6.3"]),
            ("vnopts", &["1.0.2"]),
        ],
    );
    // parse-srcset@ikatyang/parse-srcset#54eb9c1: a codeload.github.com tarball.
    assert_git(&p, "parse-srcset", "1.0.2", Some("54eb9c1cb21db5c62b4d0e275d7249516df6f0ee"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn yarn_v1_webpack_aliases_and_git() {
    let p = fixture("yarn/webpack-v1-aliases-git/yarn.lock");
    assert_clean(&p, Format::YarnV1, 1393);
    assert_versions(
        &p,
        &[
            // "prettier-2@npm:prettier@^2" resolves to prettier 2.8.8.
            ("prettier", &["2.8.8", "3.9.6"]),
            // "string-width-cjs@npm:string-width@^4.2.0" -> 4.2.3.
            ("string-width", &["4.2.3", "5.1.2", "7.2.0"]),
            ("strip-ansi", &["6.0.1", "7.2.0"]),
            ("wrap-ansi", &["6.2.0", "7.0.0", "8.1.0", "9.0.2"]),
            // react-is-18 / react-is-19 aliases.
            ("react-is", &["16.13.1", "18.3.1", "19.2.7"]),
            ("@babel/code-frame", &["7.29.7", "8.0.0"]),
            ("@types/node", &["12.20.55", "25.9.4", "26.1.0"]),
            ("acorn", &["7.4.1", "8.18.0"]),
            ("ms", &["2.0.0", "2.1.3"]),
            ("semver", &["6.3.1", "7.8.5"]),
            ("typescript", &["6.0.3"]),
        ],
    );
    assert_absent(
        &p,
        &["prettier-2", "string-width-cjs", "strip-ansi-cjs", "wrap-ansi-cjs", "react-is-18", "react-is-19"],
    );
    // tooling@webpack/tooling#v1.28.1, resolved from codeload.github.com.
    assert_git(&p, "tooling", "1.28.1", Some("4c13a00ac84cf0e2dd57c457cd1ce46faa9e456a"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn yarn_berry_v6_patches_and_workspace() {
    let p = fixture("yarn/prettier-berry-v6/yarn.lock");
    assert_clean(&p, Format::YarnBerry, 883);
    assert_versions(
        &p,
        &[
            // Each has an npm: entry and a patch: entry; listed once, at the npm version.
            ("resolve", &["1.22.1", "2.0.0-next.4"]),
            ("typescript", &["4.9.4"]),
            ("fsevents", &["2.3.2"]),
            // "node-gyp@npm:latest" resolved to 9.1.0.
            ("node-gyp", &["9.1.0"]),
            // A registry prettier is a dependency; the workspace prettier@workspace:. is not listed.
            ("prettier", &["2.8.1"]),
            ("@angular/compiler", &["15.0.3"]),
            ("@babel/core", &["7.18.10"]),
            ("esbuild", &["0.16.4"]),
            ("ms", &["2.0.0", "2.1.2", "2.1.3"]),
            ("semver", &["5.7.1", "6.3.0", "7.3.5", "7.3.8"]),
        ],
    );
    assert_lacks(&p, &[("prettier", "0.0.0-use.local")]);
    assert!(p.warnings.is_empty());
}

#[test]
fn yarn_berry_v10_aliases() {
    let p = fixture("yarn/prettier-berry-v10/yarn.lock");
    assert_clean(&p, Format::YarnBerry, 1049);
    assert_versions(
        &p,
        &[
            ("react-is", &["18.3.1", "19.2.7"]),
            ("string-width", &["4.2.3", "5.1.2", "7.2.0"]),
            ("strip-ansi", &["6.0.1", "7.2.0"]),
            ("wrap-ansi", &["7.0.0", "8.1.0", "9.0.2"]),
            ("typescript", &["6.0.3"]),
            ("fsevents", &["2.3.3"]),
            ("node-gyp", &["13.0.1"]),
            ("prettier", &["3.9.6"]),
            ("@angular/compiler", &["22.0.8"]),
            ("@babel/core", &["7.29.7"]),
            ("esbuild", &["0.28.1"]),
            ("semver", &["6.3.1", "7.8.5"]),
        ],
    );
    assert_absent(&p, &["react-is-18", "react-is-19", "string-width-cjs", "strip-ansi-cjs", "wrap-ansi-cjs"]);
    assert_lacks(&p, &[("prettier", "0.0.0-use.local")]);
}

// --------------------------------------------------------------- pnpm fixtures

#[test]
fn pnpm_v5_4_peer_suffixes() {
    let p = fixture("pnpm/vue-core-v5.4/pnpm-lock.yaml");
    // 760 keys; /vite/4.2.1 and /vite/4.2.1_ghge5pqdvzsmxto52quo4r2say are one package.
    assert_clean(&p, Format::Pnpm, 759);
    assert_versions(
        &p,
        &[
            ("vite", &["4.2.1"]),
            ("@rollup/plugin-alias", &["4.0.3"]), // /..._rollup@3.20.2
            ("@babel/helper-compilation-targets", &["7.20.7"]), // /..._@babel+core@7.21.3
            ("string_decoder", &["1.1.1", "1.3.0"]), // '_' in the name, not a peer suffix
            ("semver", &["5.7.1", "6.3.0", "7.3.8"]),
            ("esbuild", &["0.17.5"]),
            ("typescript", &["5.0.2"]),
            ("@babel/parser", &["7.21.3"]),
            ("rollup", &["3.20.2"]),
            ("@types/node", &["16.18.11"]),
        ],
    );
    // Workspace packages, linked with link:../x in the importers.
    assert_absent(&p, &["vue", "@vue/shared", "@vue/compiler-core", "@vue/runtime-dom"]);
}

#[test]
fn pnpm_v6_0_parenthesized_peers() {
    let p = fixture("pnpm/vue-core-v6.0/pnpm-lock.yaml");
    assert_clean(&p, Format::Pnpm, 802);
    assert_versions(
        &p,
        &[
            ("@codspeed/vitest-plugin", &["2.3.1"]), // /@codspeed/vitest-plugin@2.3.1(vite@5.0.7)(vitest@1.0.4)
            ("@rollup/plugin-alias", &["5.0.1"]),
            ("semver", &["5.7.2", "6.3.1", "7.5.4"]),
            ("string_decoder", &["1.1.1"]),
            ("vite", &["5.0.7"]),
            ("typescript", &["5.2.2"]),
            ("@babel/parser", &["7.23.5"]),
            ("rollup", &["4.1.4", "4.4.1"]),
            ("@types/node", &["20.10.4"]),
        ],
    );
    assert_absent(&p, &["vue", "@vue/shared", "@vue/dts-built-test"]);
}

#[test]
fn pnpm_v9_0_packages_not_snapshots() {
    let p = fixture("pnpm/vue-core-v9.0/pnpm-lock.yaml");
    assert_clean(&p, Format::Pnpm, 620);
    assert_versions(
        &p,
        &[
            ("@vitejs/plugin-vue", &["6.0.8"]), // snapshot key '@vitejs/plugin-vue@6.0.8(vite@8.2.0)(vue@packages+vue)'
            ("entities", &["7.0.1", "8.0.0"]),
            ("string-width", &["4.2.3", "5.1.2", "7.2.0"]),
            ("string_decoder", &["1.1.1"]),
            ("semver", &["7.8.5"]),
            ("typescript", &["5.6.3", "6.0.3"]),
            ("vite", &["8.2.0"]),
            ("@babel/parser", &["7.29.8"]),
            ("rollup", &["4.62.4"]),
            ("@types/node", &["24.13.3"]),
            ("magic-string", &["0.30.21"]),
        ],
    );
    assert_absent(&p, &["vue", "@vue/shared", "dts-built-test"]);
}

#[test]
fn pnpm_v9_0_single_project() {
    let p = fixture("pnpm/osv-dev-frontend3-v9.0/pnpm-lock.yaml");
    assert_clean(&p, Format::Pnpm, 416);
    assert_versions(
        &p,
        &[
            ("@github/clipboard-copy-element", &["1.3.2"]),
            ("@hotwired/turbo", &["8.0.23"]),
            ("@material/data-table", &["14.0.0"]),
            ("@material/theme", &["14.0.0"]),
            ("@material/web", &["2.5.0"]),
            ("json-formatter-js", &["2.5.23"]),
            ("lit", &["3.3.3"]),
            ("tslib", &["1.14.1", "2.8.1"]),
        ],
    );
}

// ------------------------------------------------------------ npm edge cases

const PKG: &str = "package-lock.json";

#[test]
fn npm_v1_aliases_git_file_tarballs() {
    let p = ok(
        PKG,
        r#"{
  "name": "root", "version": "1.0.0", "lockfileVersion": 1, "requires": true,
  "dependencies": {
    "babel-code-frame": {"version": "npm:@babel/code-frame@7.0.0"},
    "string-width-cjs": {"version": "npm:string-width@4.2.0"},
    "string-width": {"version": "5.1.2", "dev": true},
    "fsevents": {"version": "1.2.9", "optional": true, "dependencies": {
      "abbrev": {"version": "1.1.1", "bundled": true},
      "chownr": {"version": "1.1.1", "bundled": true, "dependencies": {
        "minimist": {"version": "0.0.8", "bundled": true}
      }}
    }},
    "git-a": {"version": "git+ssh://git@github.com/a/a.git#0a2d2506c1fe299691fc5db53a2097db3bd615bc", "from": "git-a@github:a/a"},
    "git-b": {"version": "github:b/b#d5ac0584ee9ae7bd9288220a39780f155b9ad4c8"},
    "git-c": {"version": "gitlab:c/c#c5a7ba5e0ad98b8db1cb8ce105403dd4b768cced"},
    "local": {"version": "file:deps/local", "dependencies": {"left-pad": {"version": "1.3.0"}}},
    "node-uuid": {"version": "https://registry.npmjs.org/node-uuid/-/node-uuid-1.4.7.tgz"},
    "elsewhere": {"version": "https://example.com/elsewhere.tgz"},
    "pre": {"version": "1.0.0-rc.1+build.5"}
  }
}"#,
    );
    assert_clean(&p, Format::NpmPackageLock, 14);
    assert_versions(
        &p,
        &[
            ("@babel/code-frame", &["7.0.0"]),
            ("string-width", &["4.2.0", "5.1.2"]),
            ("fsevents", &["1.2.9"]),
            ("abbrev", &["1.1.1"]),
            ("chownr", &["1.1.1"]),
            ("minimist", &["0.0.8"]),
            ("left-pad", &["1.3.0"]), // a registry dependency of a local package is still one
            ("node-uuid", &["1.4.7"]),
            ("pre", &["1.0.0-rc.1+build.5"]),
        ],
    );
    assert_absent(&p, &["babel-code-frame", "string-width-cjs", "local", "root"]);
    // v1 writes a git dependency's URL as its version: no version, the URL's commit.
    assert_git(&p, "git-a", "", Some("0a2d2506c1fe299691fc5db53a2097db3bd615bc"));
    assert_git(&p, "git-b", "", Some("d5ac0584ee9ae7bd9288220a39780f155b9ad4c8"));
    assert_git(&p, "git-c", "", Some("c5a7ba5e0ad98b8db1cb8ce105403dd4b768cced"));
    // A tarball URL that is not a registry's: listed without a version (the
    // URL may hold a token), for the scan to report.
    assert_git(&p, "elsewhere", "", None);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_v3_every_entry_kind() {
    let p = ok(
        PKG,
        r#"{
  "name": "root", "version": "1.0.0", "lockfileVersion": 3,
  "packages": {
    "": {"name": "root", "version": "1.0.0", "workspaces": ["packages/a"]},
    "packages/a": {"name": "@ws/a", "version": "0.1.0"},
    "packages/a/node_modules/left-pad": {"version": "1.1.0", "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.1.0.tgz"},
    "node_modules/@ws/a": {"resolved": "packages/a", "link": true},
    "node_modules/left-pad": {"version": "1.3.0", "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz", "dev": true},
    "node_modules/a/node_modules/@s/b": {"version": "2.0.0", "peer": true},
    "node_modules/@s/b": {"version": "1.0.0", "optional": true, "devOptional": true},
    "node_modules/string-width-cjs": {"name": "string-width", "version": "4.2.3", "resolved": "https://registry.npmjs.org/string-width/-/string-width-4.2.3.tgz"},
    "node_modules/b/node_modules/ansi-regex": {"version": "6.2.2", "inBundle": true},
    "node_modules/gitdep": {"version": "1.0.0", "resolved": "git+ssh://git@github.com/x/gitdep.git#5e28810649ba41b5483753ba74f976f83856a504"},
    "node_modules/is-number-1": {"version": "3.0.0", "resolved": "git+ssh://git@github.com/jonschlinkert/is-number.git#af885e2"},
    "node_modules/codeload": {"version": "2.0.0", "resolved": "https://codeload.github.com/x/codeload/tar.gz/0123"},
    "node_modules/tarball": {"version": "3.0.0", "resolved": "https://npm.example.com/tarball/-/tarball-3.0.0.tgz"},
    "node_modules/localtgz": {"version": "0.0.1", "resolved": "file:vendor/localtgz-0.0.1.tgz"},
    "node_modules/noversion": {"resolved": "https://registry.npmjs.org/x/-/x.tgz"}
  }
}"#,
    );
    assert_clean(&p, Format::NpmPackageLock, 11);
    assert_versions(
        &p,
        &[
            ("left-pad", &["1.1.0", "1.3.0"]),
            ("@s/b", &["1.0.0", "2.0.0"]),
            ("string-width", &["4.2.3"]),
            ("ansi-regex", &["6.2.2"]),
            ("tarball", &["3.0.0"]),
        ],
    );
    assert_absent(&p, &["root", "@ws/a", "string-width-cjs", "is-number", "localtgz"]);
    // Git dependencies under their recorded version, with the commit when
    // `resolved` names one (`0123` is too short to be one).
    assert_git(&p, "gitdep", "1.0.0", Some("5e28810649ba41b5483753ba74f976f83856a504"));
    assert_git(&p, "is-number-1", "3.0.0", Some("af885e2"));
    assert_git(&p, "codeload", "2.0.0", None);
    assert_git(&p, "noversion", "", None);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn npm_v2_prefers_packages_and_falls_back() {
    let both = r#"{"lockfileVersion": 2,
      "packages": {"": {"name": "r"}, "node_modules/a": {"version": "2.0.0"}},
      "dependencies": {"a": {"version": "1.0.0"}, "stale": {"version": "9.9.9"}}}"#;
    let p = ok(PKG, both);
    assert_clean(&p, Format::NpmPackageLock, 1);
    assert_versions(&p, &[("a", &["2.0.0"])]);
    let legacy_only = r#"{"lockfileVersion": 2, "dependencies": {"a": {"version": "1.0.0"}}}"#;
    assert_versions(&ok(PKG, legacy_only), &[("a", &["1.0.0"])]);
    let empty_v1 = r#"{"name": "r", "lockfileVersion": 1, "requires": true}"#;
    assert!(ok(PKG, empty_v1).packages.is_empty());
    let p = ok(
        "npm-shrinkwrap.json",
        r#"{"lockfileVersion": 3, "packages": {"node_modules/a": {"version": "1.0.0"}}}"#,
    );
    assert_eq!(p.format, Format::NpmShrinkwrap);
}

#[test]
fn npm_errors() {
    let e = err(PKG, r#"{"lockfileVersion": 99, "packages": {}}"#);
    assert_eq!((e.code, e.line), (ParseErrorCode::UnsupportedVersion, Some(1)));
    assert_eq!(e.file, PKG);
    // An unknown version is reported as such even when the rest is unreadable.
    let e = err(PKG, "{\n\"packages\": 7,\n\"lockfileVersion\": 0\n}");
    assert_eq!((e.code, e.line), (ParseErrorCode::UnsupportedVersion, Some(3)));
    assert_eq!(err(PKG, r#"{"lockfileVersion": "3", "packages": {}}"#).code, ParseErrorCode::Structure);
    assert_eq!(
        err(PKG, r#"{"lockfileVersion": 2.5, "packages": {}}"#).code,
        ParseErrorCode::UnsupportedVersion
    );
    assert_eq!(err(PKG, r#"{"note": "lockfileVersion", "packages": {}}"#).code, ParseErrorCode::Structure);
    assert_eq!(err(PKG, r#"{"lockfileVersion": 3}"#).code, ParseErrorCode::Structure);
    assert_eq!(err(PKG, r#"{"lockfileVersion": 1, "packages": {}}"#).code, ParseErrorCode::Structure);
    let e = err(PKG, "{\"lockfileVersion\": 3,\n\"packages\": []}");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)));
    let e = err(PKG, "{\"lockfileVersion\": 3, \"packages\": {\n\"node_modules/a\": \"1.0.0\"}}");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)));
    let e = err(PKG, "{\"lockfileVersion\": 3, \"packages\": {\n\"node_modules/a\": {\"version\": 1}}}");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)));
    let e = err(
        PKG,
        "{\"lockfileVersion\": 1, \"dependencies\": {\n\"a\": {\"link\": true, \"dependencies\": [1]}}}",
    );
    assert_eq!(e.code, ParseErrorCode::Structure);
    let e = err(PKG, r#"{"lockfileVersion": 3, "packages": {"node_modules/": {"version": "1.0.0"}}}"#);
    assert_eq!(e.code, ParseErrorCode::Structure);
    // An entry the parser cannot read (no version and no source, or null)
    // fails the parse at its line, even beside readable ones.
    let ok_entry = "\"node_modules/ok\": {\"version\": \"1.0.0\"},";
    for bad in ["\"node_modules/a\": {}", "\"node_modules/b\": null"] {
        let e = err(PKG, &format!("{{\"lockfileVersion\": 3, \"packages\": {{{ok_entry}\n{bad}}}}}"));
        assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)), "{bad}: {e}");
    }
    let e = err(
        PKG,
        "{\"lockfileVersion\": 1, \"dependencies\": {\"ok\": {\"version\": \"1.0.0\"},\n\"a\": {\"x\": 1}}}",
    );
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)), "{e}");
    let e = err(PKG, "{\"lockfileVersion\": 1, \"dependencies\": {\n\"a\": null}}");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)), "{e}");
    // A repeated key: JSON.parse would keep the last one silently.
    let e = err(
        PKG,
        "{\"lockfileVersion\": 3, \"packages\": {\"node_modules/a\": {\"version\": \"1.0.0\"},\n\"node_modules/a\": {\"version\": \"9.0.0\"}}}",
    );
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(2)), "{e}");
    let e = err(
        PKG,
        "{\"lockfileVersion\": 3, \"packages\": {\"node_modules/a\": {\"version\": \"1.0.0\",\n\"version\": \"9.0.0\"}}}",
    );
    assert_eq!(e.code, ParseErrorCode::Structure, "{e}");
    // JSON with a stray comma.
    let e = err(PKG, "{\"lockfileVersion\": 3,\n\"packages\": {,}}");
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(2)));
}

#[test]
fn npm_truncated_fixture_is_a_syntax_error() {
    let path = format!(
        "{}/tests/fixtures/npm/dependency-review-action-v3/package-lock.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(path).expect("fixture");
    for cut in [bytes.len() / 3, bytes.len() / 2, bytes.len() - 2] {
        let e = parse(PKG, bytes.get(..cut).expect("cut")).expect_err("truncated");
        assert_eq!(e.code, ParseErrorCode::Syntax, "cut at {cut}: {e}");
        assert!(e.line.is_some_and(|l| l > 1), "{e}");
    }
}

#[test]
fn json_nesting_is_bounded() {
    const DEPTH: usize = 100_000;
    // Where the parser descends (v1 `dependencies` inside `dependencies`, or
    // `packages` itself), serde_json's recursion limit (128) refuses the file.
    let chain = format!(
        "{{\"lockfileVersion\": 1, \"dependencies\": {}{{}}{}}}",
        "{\"a\": {\"version\": \"1.0.0\", \"dependencies\": ".repeat(DEPTH),
        "}}".repeat(DEPTH)
    );
    let started = Instant::now();
    let e = err(PKG, &chain);
    assert_eq!(e.code, ParseErrorCode::Syntax, "{e}");
    assert!(e.message.contains("recursion limit"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // In fields the parser ignores, serde_json skips the value without
    // recursing: no stack overflow, and the rest of the file still counts.
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let maps = format!("{}1{}", "{\"a\":".repeat(DEPTH), "}".repeat(DEPTH));
    for deep in [arrays, maps] {
        let started = Instant::now();
        let doc = format!(
            "{{\"lockfileVersion\": 3, \"x\": {deep}, \"packages\": {{\"node_modules/a\": {{\"version\": \"1.0.0\", \"y\": {deep}}}}}}}"
        );
        assert_versions(&ok(PKG, &doc), &[("a", &["1.0.0"])]);
        // As an entry's value: no version anywhere is not a lockfile.
        let doc =
            format!("{{\"lockfileVersion\": 3, \"packages\": {{\"node_modules/a\": {{\"a\": {deep}}}}}}}");
        assert_eq!(err(PKG, &doc).code, ParseErrorCode::Structure);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

// ----------------------------------------------------------- yarn edge cases

const YARN: &str = "yarn.lock";
const V1: &str = "# THIS IS AN AUTOGENERATED FILE. DO NOT EDIT THIS FILE DIRECTLY.\n# yarn lockfile v1\n\n\n";

#[test]
fn yarn_v1_descriptors_aliases_git_and_local() {
    let text = format!(
        r#"{V1}"@babel/code-frame@^7.0.0", "@babel/code-frame@^7.16.7":
  version "7.16.7"
  resolved "https://registry.yarnpkg.com/@babel/code-frame/-/code-frame-7.16.7.tgz#44416b6bd7624b998f5b1af5d470856c40138789"
  integrity sha512-iAXqUn8IIeBTNd72xsFlgaXHkMBMt6y4HJp1tIaK465CWLT/fG1aqB7ykr95gHHmlBdGbFeWWfyB4NJJ0nmeIg==
  dependencies:
    "@babel/highlight" "^7.16.7"

"string-width-cjs@npm:string-width@^4.2.0", string-width@^4.1.0:
  version "4.2.3"
  resolved "https://registry.yarnpkg.com/string-width/-/string-width-4.2.3.tgz"

"babel-hvi@npm:@babel/helper-validator-identifier@^7.0.0":
  version "7.22.20"

"self-alias@npm:^1.0.0":
  version "1.2.0"

balanced-match:
  version "1.0.2"

concat-map@0.0.1:
  "version" "0.0.1"
  "resolved" "https://registry.yarnpkg.com/concat-map/-/concat-map-0.0.1.tgz"
  "dependencies":
    "x" "^1"

pre@^2.0.0-rc:
  version "2.0.0-rc.1+build.5"
  optional true

"mine1@git+ssh://git@github.com:G-Rath/npm-git-repo-2#0a2d2506c1":
  version "1.0.0-alpha.37"
  resolved "git+ssh://git@github.com:G-Rath/npm-git-repo-2#0a2d2506c1fe299691fc5db53a2097db3bd615bc"

mine2@G-Rath/npm-git-repo-2#0a2d2506c1:
  version "0.0.1"
  resolved "https://codeload.github.com/G-Rath/npm-git-repo-2/tar.gz/0a2d2506c1fe299691fc5db53a2097db3bd615bc"

mine3@G-Rath/npm-git-repo-1:
  version "1.2.3"

minimist@0.0.8, "minimist@ssh://github.com/substack/minimist.git#0.0.8":
  version "0.0.8"
  resolved "ssh://github.com/substack/minimist.git#3754568bfd43a841d2d72d7fb54598635aea8fa4"

"filedep@file:../filedep":
  version "1.2.0"

"sprintf-js@file:./mocks/sprintf-js", sprintf-js@~1.0.2:
  version "0.0.0"

"etag@link:./deps/etag":
  version "1.8.0"

tarball@https://example.com/tarball-3.0.0.tgz:
  version "3.0.0"
  resolved "https://example.com/tarball-3.0.0.tgz"

tagged@latest:
  version "next"
"#
    );
    let p = ok(YARN, &text);
    assert_clean(&p, Format::YarnV1, 13);
    assert_versions(
        &p,
        &[
            ("@babel/code-frame", &["7.16.7"]),
            ("string-width", &["4.2.3"]),
            ("@babel/helper-validator-identifier", &["7.22.20"]),
            ("self-alias", &["1.2.0"]),
            ("balanced-match", &["1.0.2"]),
            ("concat-map", &["0.0.1"]),
            ("pre", &["2.0.0-rc.1+build.5"]),
            ("tarball", &["3.0.0"]),
        ],
    );
    assert_absent(
        &p,
        &["string-width-cjs", "babel-hvi", "filedep", "sprintf-js", "etag", "x", "@babel/highlight"],
    );
    let full = "0a2d2506c1fe299691fc5db53a2097db3bd615bc";
    assert_git(&p, "mine1", "1.0.0-alpha.37", Some(full)); // git+ssh resolved
    assert_git(&p, "mine2", "0.0.1", Some(full)); // codeload.github.com
    // A GitHub shorthand without `resolved`: the descriptor's `#0a2d2506c1`.
    assert_git(&p, "mine3", "1.2.3", None);
    // ssh:// resolved, one descriptor a plain range.
    assert_git(&p, "minimist", "0.0.8", Some("3754568bfd43a841d2d72d7fb54598635aea8fa4"));
    // A dist-tag as a version: kept as written, for the scan to report.
    assert_versions(&p, &[("tagged", &["next"])]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn yarn_v1_crlf_trailing_space_and_empty() {
    let text = format!("{V1}a@^1: \n  version \"1.0.0\" \t\n").replace('\n', "\r\n");
    assert_versions(&ok(YARN, &text), &[("a", &["1.0.0"])]);
    assert!(ok(YARN, V1).packages.is_empty());
}

#[test]
fn yarn_v1_errors_name_the_line() {
    let cases: [(&str, ParseErrorCode, usize); 10] = [
        ("a@^1:\n  resolved \"https://x.test/a.tgz\"\n", ParseErrorCode::Structure, 5), // no version
        ("a@^1:\n  version \"1.0.0\n", ParseErrorCode::Syntax, 6),                      // unterminated
        ("a@^1\n  version \"1.0.0\"\n", ParseErrorCode::Syntax, 5),                     // header without ':'
        ("a@^1:\n    version \"1.0.0\"\n", ParseErrorCode::Syntax, 6),                  // over-indented
        ("a@^1:\n   version \"1.0.0\"\n", ParseErrorCode::Syntax, 6),                   // odd indent
        ("a@^1:\n\tversion \"1.0.0\"\n", ParseErrorCode::Syntax, 6),                    // tab
        ("  version \"1.0.0\"\n", ParseErrorCode::Syntax, 5),                           // outside an entry
        ("\"a@^1\" b@2:\n  version \"1.0.0\"\n", ParseErrorCode::Syntax, 5),            // missing comma
        ("a@^1, :\n  version \"1.0.0\"\n", ParseErrorCode::Syntax, 5),                  // empty descriptor
        ("{\"lockfileVersion\": 1}\n", ParseErrorCode::Syntax, 5), // JSON after the header
    ];
    for (body, code, line) in cases {
        let e = err(YARN, &format!("{V1}{body}"));
        assert_eq!((e.code, e.line), (code, Some(line)), "{body:?}: {e}");
        assert_eq!(e.file, YARN);
    }
}

#[test]
fn yarn_v1_truncated_fixture() {
    let path = format!("{}/tests/fixtures/yarn/webpack-v1-aliases-git/yarn.lock", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture");
    // Cut right after an entry header: the entry has no version.
    let cut = text.find("\"prettier-2@npm:prettier@^2\":\n").expect("entry")
        + "\"prettier-2@npm:prettier@^2\":\n".len();
    let e = err(YARN, text.get(..cut).expect("cut"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(8391)));
    // Cut inside a quoted string.
    let cut = cut + "  version \"2.8".len();
    let e = err(YARN, text.get(..cut).expect("cut"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(8392)));
}

const BERRY: &str = "# This file is generated by running \"yarn install\" inside your project.\n# Manual changes might be lost - proceed with caution!\n\n__metadata:\n  version: 8\n  cacheKey: 10c0\n\n";

#[test]
fn yarn_berry_protocols() {
    let text = format!(
        r#"{BERRY}"@babel/core@npm:^7.0.0, @babel/core@npm:^7.1.0":
  version: 7.1.2
  resolution: "@babel/core@npm:7.1.2"
  dependencies:
    "@babel/code-frame": ^7.0.0
  checksum: 10c0/abc
  languageName: node
  linkType: hard

"string-width-cjs@npm:string-width@^4.2.0, string-width@npm:^4.1.0":
  version: 4.2.3
  resolution: "string-width@npm:4.2.3"

"babel-hvi@npm:@babel/helper-validator-identifier@^7.0.0":
  version: 7.22.20
  resolution: "@babel/helper-validator-identifier@npm:7.22.20"

"resolve@npm:^1.22.1":
  version: 1.22.1
  resolution: "resolve@npm:1.22.1"

"resolve@patch:resolve@npm%3A^1.22.1#~builtin<compat/resolve>":
  version: 1.22.1
  resolution: "resolve@patch:resolve@npm%3A1.22.1#~builtin<compat/resolve>::version=1.22.1&hash=c3c19d"

"typescript@patch:typescript@npm%3A^5.0.0#optional!builtin<compat/typescript>":
  version: 5.0.4
  resolution: "typescript@patch:typescript@npm%3A5.0.4#optional!builtin<compat/typescript>::version=5.0.4&hash=b5f058"

"custom@npm:1.0.0":
  version: 1.0.0
  resolution: "custom@npm:1.0.0::__archiveUrl=https%3A%2F%2Fnpm.example.com%2Fcustom-1.0.0.tgz"

"tarball@https://example.com/tarball-3.0.0.tgz":
  version: 3.0.0
  resolution: "tarball@https://example.com/tarball-3.0.0.tgz"

"root@workspace:.":
  version: 0.0.0-use.local
  resolution: "root@workspace:."

"@ws/a@workspace:^, @ws/a@workspace:packages/a":
  version: 0.0.0-use.local
  resolution: "@ws/a@workspace:packages/a"

"linked@link:../linked::locator=root%40workspace%3A.":
  version: 0.0.0-use.local
  resolution: "linked@link:../linked::locator=root%40workspace%3A."

"portaled@portal:../portaled::locator=root%40workspace%3A.":
  version: 0.0.0-use.local
  resolution: "portaled@portal:../portaled::locator=root%40workspace%3A."

"my-package@file:../my-local-package::locator=root%40workspace%3A.":
  version: 0.0.2
  resolution: "my-package@file:../my-local-package#../my-local-package::hash=351be1&locator=root%40workspace%3A."

"patched-local@patch:patched-local@file%3A../x#./p.patch::locator=root%40workspace%3A.":
  version: 1.0.0
  resolution: "patched-local@patch:patched-local@file%3A../x#./p.patch::version=1.0.0&hash=1&locator=root%40workspace%3A."

"gen@exec:./gen.js":
  version: 0.0.0
  resolution: "gen@exec:./gen.js#./gen.js::hash=1&locator=root%40workspace%3A."

"vuejs@https://github.com/vuejs/vue.git":
  version: 2.5.0
  resolution: "vuejs@https://github.com/vuejs/vue.git#commit=0948d999f2fddf9f90991956493f976273c5da1f"

"is-really-great@ssh://git@github.com:my-org/is-really-great.git":
  version: 1.0.0
  resolution: "is-really-great@ssh://git@github.com:my-org/is-really-great.git#commit=191eeef50c584714e1fb8927d17ee72b3b8c97c4"

"odd@weird:thing":
  version: 1.0.0
  resolution: "odd@weird:thing"
"#
    );
    let p = ok(YARN, &text);
    assert_clean(&p, Format::YarnBerry, 10);
    assert_versions(
        &p,
        &[
            ("@babel/core", &["7.1.2"]),
            ("string-width", &["4.2.3"]),
            ("@babel/helper-validator-identifier", &["7.22.20"]),
            ("resolve", &["1.22.1"]),   // npm: and patch: entries, once
            ("typescript", &["5.0.4"]), // patch: only
            ("custom", &["1.0.0"]),
            ("tarball", &["3.0.0"]),
        ],
    );
    assert_absent(
        &p,
        &[
            "__metadata",
            "string-width-cjs",
            "babel-hvi",
            "root",
            "@ws/a",
            "linked",
            "portaled",
            "my-package",
            "patched-local",
            "gen",
        ],
    );
    // Git locators: the entry's version, the locator's `#commit=`.
    assert_git(&p, "vuejs", "2.5.0", Some("0948d999f2fddf9f90991956493f976273c5da1f"));
    assert_git(&p, "is-really-great", "1.0.0", Some("191eeef50c584714e1fb8927d17ee72b3b8c97c4"));
    // A protocol gatehouse does not know: still checked, under its version.
    assert_versions(&p, &[("odd", &["1.0.0"])]);
    assert_eq!(warning_codes(&p), ["unsupported_protocol"]);
}

#[test]
fn yarn_berry_errors() {
    let e = err(YARN, "__metadata:\n  version: 99\n  cacheKey: 8\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::UnsupportedVersion, Some(1)));
    assert_eq!(err(YARN, "__metadata:\n  cacheKey: 8\n").code, ParseErrorCode::Structure);
    assert_eq!(err(YARN, "__metadata:\n  version: six\n").code, ParseErrorCode::Structure);
    assert_eq!(err(YARN, "__metadata:\n").code, ParseErrorCode::Structure);
    let e = err(YARN, &format!("{BERRY}\"a@npm:^1\":\n  version: 1.0.0\n"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(8)));
    let e = err(YARN, &format!("{BERRY}\"a@npm:^1\":\n  version: 1.0.0\n  resolution: \"nameless\"\n"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(8)));
    let e = err(YARN, &format!("{BERRY}\"a@npm:^1\":\n  version: 1.0.0\n  resolution: [a]\n"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(10)));
    let e = err(YARN, &format!("{BERRY}\"a@npm:^1\": 7\n"));
    assert_eq!(e.code, ParseErrorCode::Structure);
    let e = err(YARN, &format!("{BERRY}\"a@npm:^1\":\n  version: 1.0.0\n  resolution: \"a@npm:1.0.0\n"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(10)));
    let e = err(
        YARN,
        &format!(
            "{BERRY}\"a@npm:^1\":\n  resolution: \"a@npm:1.0.0\"\n\"a@npm:^1\":\n  resolution: \"a@npm:1.0.0\"\n"
        ),
    );
    assert_eq!(e.code, ParseErrorCode::Syntax); // a repeated key
    // A pnpm lockfile named yarn.lock is not read as either.
    assert_eq!(err(YARN, "lockfileVersion: '9.0'\npackages: {}\n").code, ParseErrorCode::FormatMismatch);
}

#[test]
fn yarn_berry_truncated_fixture() {
    let path = format!("{}/tests/fixtures/yarn/prettier-berry-v6/yarn.lock", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture");
    let cut = text.find("resolution: \"resolve@patch:").expect("entry") + "resolution: \"resolve@pa".len();
    let e = err(YARN, text.get(..cut).expect("cut"));
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(7178)));
}

// ----------------------------------------------------------- pnpm edge cases

const PNPM: &str = "pnpm-lock.yaml";

#[test]
fn pnpm_v5_keys_and_sources() {
    let p = ok(
        PNPM,
        r#"lockfileVersion: 5.3

specifiers:
  foo: ^1.0.0

dependencies:
  foo: 1.0.0

packages:
  /foo/1.0.0:
  /@foo/bar/1.0.0:
    resolution: {integrity: sha512-x}
    dev: true
  /foo/1.4.0_@types+babel__core@7.1.14:
  /peer/2.0.0_react@18.0.0+react-dom@18.0.0:
    optional: true
  registry.npm.invalid/foo/1.1.0:
  registry.npm.invalid/@foo/bar/1.1.0:
  example.com/foo/1.3.0_bar@2.0.0:
  /foo/bar:
  git@bitbucket.org+my-org/pkg/6104ae42cd32c3d724036d3964678f197b2c9cdb:
    resolution: {commit: 6104ae42cd32c3d724036d3964678f197b2c9cdb, repo: 'git@bitbucket.org:my-org/pkg.git', type: git}
    name: my-bitbucket-package
    version: 1.0.0
  github.com/my-org/mocks/590f321b4eb3f692bb211bd74e22947639a6f79d:
    resolution: {tarball: https://codeload.github.com/my-org/mocks/tar.gz/590f321b4eb3f692bb211bd74e22947639a6f79d}
    name: mocks
    version: 20.0.1
  '@gitlab.my-org.org/api/v4/projects/1/packages/npm/@my-org/my-package/-/@my-org/my-package-3.2.3.tgz':
    resolution: {tarball: 'https://gitlab.my-org.org/api/v4/projects/1/packages/npm/@my-org/my-package/-/@my-org/my-package-3.2.3.tgz'}
    name: '@my-org/my-package'
    version: 3.2.3
  file:projects/package-a.tgz:
    resolution: {integrity: sha512-x, tarball: file:projects/package-a.tgz}
    name: my-file-package
    version: 0.0.0
  file:../a-local-package:
    resolution: {directory: ../local-package, type: directory}
    name: a-local-package
    version: 1.0.0
  file:.._react-dom@18.2.0:
    resolution: {directory: .., type: directory}
    name: one-up-with-peer
    version: 1.0.0
"#,
    );
    assert_clean(&p, Format::Pnpm, 11);
    assert_versions(
        &p,
        &[
            // `/foo/bar` names version `bar`: kept as written, for the scan to report.
            ("foo", &["1.0.0", "1.1.0", "1.3.0", "1.4.0", "bar"]),
            ("@foo/bar", &["1.0.0", "1.1.0"]),
            ("peer", &["2.0.0"]),
            ("@my-org/my-package", &["3.2.3"]),
        ],
    );
    assert_absent(&p, &["my-file-package", "a-local-package", "one-up-with-peer"]);
    assert_git(&p, "my-bitbucket-package", "1.0.0", Some("6104ae42cd32c3d724036d3964678f197b2c9cdb"));
    assert_git(&p, "mocks", "20.0.1", Some("590f321b4eb3f692bb211bd74e22947639a6f79d"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn pnpm_v6_and_v9_keys() {
    let v6 = ok(
        PNPM,
        r#"lockfileVersion: '6.0'

packages:

  /js-tokens@4.0.0:
    resolution: {integrity: sha512-x}
    dev: false

  /react-dom@18.0.0-rc.3(react@18.2.0):
    resolution: {integrity: sha512-x}
    dev: false

  /@typescript-eslint/eslint-plugin@5.62.0(@typescript-eslint/parser@5.62.0(eslint@8.57.0)(typescript@4.9.5))(eslint@8.57.0):
    resolution: {integrity: sha512-x}
    dev: true
"#,
    );
    assert_clean(&v6, Format::Pnpm, 3);
    assert_versions(
        &v6,
        &[
            ("js-tokens", &["4.0.0"]),
            ("react-dom", &["18.0.0-rc.3"]),
            ("@typescript-eslint/eslint-plugin", &["5.62.0"]),
        ],
    );
    let v9 = ok(
        PNPM,
        r#"lockfileVersion: '9.0'

settings:
  autoInstallPeers: true
  excludeLinksFromLockfile: false

importers:

  .:
    dependencies:
      string-width-cjs:
        specifier: npm:string-width@^4.2.0
        version: string-width@4.2.3
      local:
        specifier: link:../local
        version: link:../local
      ansi-regex:
        specifier: git@github.com/chalk/ansi-regex.git
        version: https://codeload.github.com/chalk/ansi-regex/tar.gz/02fa893d619d3da85411acc8fd4e2eea0e95a9d9

packages:

  '@isaacs/cliui@8.0.2':
    resolution: {integrity: sha512-x}

  string-width@4.2.3:
    resolution: {integrity: sha512-x}

  string-width@5.1.2:
    resolution: {integrity: sha512-x}

  ansi-regex@https://codeload.github.com/chalk/ansi-regex/tar.gz/02fa893d619d3da85411acc8fd4e2eea0e95a9d9:
    resolution: {tarball: https://codeload.github.com/chalk/ansi-regex/tar.gz/02fa893d619d3da85411acc8fd4e2eea0e95a9d9}
    version: 6.0.1

  is-number@git+https://github.com/jonschlinkert/is-number.git#98e8ff1da1a89f93d1397a24d7413ed15421c139:
    resolution: {commit: 98e8ff1da1a89f93d1397a24d7413ed15421c139, repo: https://github.com/jonschlinkert/is-number.git, type: git}
    version: 7.0.0

  private@https://npm.example.com/private/-/private-2.0.0.tgz:
    resolution: {tarball: https://npm.example.com/private/-/private-2.0.0.tgz}
    version: 2.0.0

  dir@file:../dir:
    resolution: {directory: ../dir, type: directory}
    version: 1.0.0

  node@runtime:22.0.0:
    resolution: {type: variations, variants: []}
    version: 22.0.0

snapshots:

  '@isaacs/cliui@8.0.2':
    dependencies:
      string-width: 5.1.2
      string-width-cjs: string-width@4.2.3

  string-width@4.2.3: {}

  string-width@5.1.2: {}

  only-in-snapshots@1.0.0(react@18.0.0): {}
"#,
    );
    assert_clean(&v9, Format::Pnpm, 6);
    assert_versions(
        &v9,
        &[("@isaacs/cliui", &["8.0.2"]), ("string-width", &["4.2.3", "5.1.2"]), ("private", &["2.0.0"])],
    );
    assert_absent(&v9, &["string-width-cjs", "local", "dir", "only-in-snapshots", "node"]);
    // Git packages, named by their `name@<git URL>` keys.
    assert_git(&v9, "ansi-regex", "6.0.1", Some("02fa893d619d3da85411acc8fd4e2eea0e95a9d9"));
    assert_git(&v9, "is-number", "7.0.0", Some("98e8ff1da1a89f93d1397a24d7413ed15421c139"));
    assert!(v9.warnings.is_empty(), "{:?}", v9.warnings);
}

/// pnpm 11+ writes an "env" document (pnpm itself, config dependencies) before
/// the project's lockfile; both are lockfiles and both are read.
#[test]
fn pnpm_two_documents() {
    let text = r#"---
lockfileVersion: '9.0'

importers:

  .:
    configDependencies: {}
    packageManagerDependencies:
      '@pnpm/exe':
        specifier: 11.0.3
        version: 11.0.3

packages:

  '@pnpm/exe@11.0.3':
    resolution: {integrity: sha512-x}
    hasBin: true

  '@pnpm/linux-x64@11.0.3':
    resolution: {integrity: sha512-x}

snapshots:

  '@pnpm/exe@11.0.3':
    optionalDependencies:
      '@pnpm/linux-x64': 11.0.3

---
lockfileVersion: '9.0'

settings:
  autoInstallPeers: true
  excludeLinksFromLockfile: false

importers:

  .:
    dependencies:
      is-odd:
        specifier: 3.0.1
        version: 3.0.1

packages:

  is-number@6.0.0:
    resolution: {integrity: sha512-x}

  is-odd@3.0.1:
    resolution: {integrity: sha512-x}

snapshots:

  is-number@6.0.0: {}

  is-odd@3.0.1:
    dependencies:
      is-number: 6.0.0
"#;
    let p = ok(PNPM, text);
    assert_clean(&p, Format::Pnpm, 4);
    assert_versions(
        &p,
        &[
            ("@pnpm/exe", &["11.0.3"]),
            ("@pnpm/linux-x64", &["11.0.3"]),
            ("is-odd", &["3.0.1"]),
            ("is-number", &["6.0.0"]),
        ],
    );
    // An empty document in the stream is skipped; a v6 document beside a v9 one keeps its own key syntax.
    let mixed = "---\n---\nlockfileVersion: '6.0'\npackages:\n  /a@1.0.0(b@2.0.0): {}\n---\nlockfileVersion: 5.4\npackages:\n  /c/3.0.0_d@1.0.0: {}\n";
    assert_versions(&ok(PNPM, mixed), &[("a", &["1.0.0"]), ("c", &["3.0.0"])]);
}

#[test]
fn pnpm_unreadable_keys() {
    // One unreadable key among readable ones fails the parse at its line:
    // no partial list (osv-scalibr's and osv-scanner's fixtures).
    for (fixture, line) in
        [("invalid-path.yaml", 17), ("invalid-paths.yaml", 11), ("invalid-package-path.yaml", 44)]
    {
        let bytes =
            std::fs::read(format!("{}/tests/fixtures/pnpm-peer/{fixture}", env!("CARGO_MANIFEST_DIR")))
                .expect("fixture");
        let e = parse(PNPM, &bytes).expect_err(fixture);
        assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(line)), "{fixture}: {e}");
    }
    let e = err(PNPM, "lockfileVersion: 5.3\npackages:\n  invalidpath1: {}\n  invalidpath2: {}\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(3)));
    // A repository-path key whose entry names no package.
    let e = err(PNPM, "lockfileVersion: 5.3\npackages:\n  /a/1.0.0: {}\n  github.com/kevva/is-positive:\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(4)));
    // No packages at all is a project without dependencies.
    assert!(ok(PNPM, "lockfileVersion: '9.0'\nimporters:\n  .: {}\n").packages.is_empty());
}

#[test]
fn pnpm_errors() {
    for v in ["99", "'7.0'", "4", "'5x'", "''"] {
        let e = err(PNPM, &format!("lockfileVersion: {v}\npackages: {{}}\n"));
        assert_eq!((e.code, e.line), (ParseErrorCode::UnsupportedVersion, Some(1)), "{v}");
    }
    for v in ["5.4-inlineSpecifiers", "'6.1'", "5", "9.0"] {
        assert!(ok(PNPM, &format!("lockfileVersion: {v}\n")).packages.is_empty(), "{v}");
    }
    let e = err(PNPM, "lockfileVersion: [9]\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(1)));
    let e = err(PNPM, "lockfileVersion: '9.0'\npackages:\n  - a@1.0.0\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(3)));
    let e = err(PNPM, "lockfileVersion: '9.0'\npackages:\n  a@1.0.0:\n    resolution: 7\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(4)));
    let e = err(PNPM, "lockfileVersion: '9.0'\npackages:\n  a@1.0.0:\n    version: [1]\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Structure, Some(4)));
    let e = err(PNPM, "lockfileVersion: '9.0'\npackages:\n  a@1.0.0: {resolution: {integrity: x}\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(3)));
    let e = err(PNPM, "lockfileVersion: '9.0'\npackages:\n  a@1.0.0: {}\n  a@1.0.0: {}\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(4)));
    // Every document of a stream must be a lockfile.
    let e = err(PNPM, "lockfileVersion: '9.0'\n---\npackages: {}\n");
    assert_eq!(e.code, ParseErrorCode::Structure);
    let e = err(PNPM, "lockfileVersion: '9.0'\n---\nlockfileVersion: '99.0'\n");
    assert_eq!((e.code, e.line), (ParseErrorCode::UnsupportedVersion, Some(3)));
    let e = err(PNPM, "lockfileVersion: '9.0'\n---\n- 1\n");
    assert_eq!(e.code, ParseErrorCode::Structure);
    let many = "---\nlockfileVersion: '9.0'\n".repeat(9);
    assert_eq!(err(PNPM, &many).code, ParseErrorCode::Syntax);
    // Named pnpm-lock.yaml, holding something else.
    assert_eq!(err(PNPM, "__metadata:\n  version: 8\n").code, ParseErrorCode::FormatMismatch);
    assert_eq!(err(PNPM, "packages: {}\n").code, ParseErrorCode::FormatMismatch);
    assert_eq!(err(PNPM, "{\"lockfileVersion\": 3}").code, ParseErrorCode::FormatMismatch);
}

#[test]
fn pnpm_truncated_fixture() {
    let path = format!("{}/tests/fixtures/pnpm/vue-core-v9.0/pnpm-lock.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture");
    // Inside a flow mapping: `resolution: {integrity: sha512-...` without its `}`.
    let cut = text.find("resolution: {integrity: ").expect("entry") + "resolution: {integrity: sha".len();
    let e = err(PNPM, text.get(..cut).expect("cut"));
    assert_eq!(e.code, ParseErrorCode::Syntax, "{e}");
    assert!(e.line.is_some_and(|l| l > 400), "{e}");
}

// ------------------------------------------------------- hostile YAML and names

/// A billion-laughs document: nine anchors, each nine aliases of the last
/// (9^9 strings if expanded), used where the parser reads a package map.
fn billion_laughs(prefix: &str, target: &str) -> String {
    let mut doc =
        format!("{prefix}a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        if let [prev, next] = pair {
            let items = vec![format!("*{prev}"); 9].join(",");
            doc.push_str(&format!("{next}: &{next} [{items}]\n"));
        }
    }
    doc.push_str(&format!("{target}: {{x: *i, y: *i, z: *i}}\n"));
    doc
}

/// The process's peak resident memory, where Linux reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn yaml_alias_bombs_are_refused() {
    let docs = [
        (PNPM, billion_laughs("lockfileVersion: '9.0'\n", "packages")),
        (PNPM, billion_laughs("lockfileVersion: 5.4\n", "importers")),
        (YARN, billion_laughs("__metadata:\n  version: 8\n  cacheKey: 10c0\n", "\"x@npm:1\"")),
    ];
    for (name, doc) in docs {
        let started = Instant::now();
        let e = err(name, &doc);
        assert_eq!(e.code, ParseErrorCode::Syntax, "{e}");
        assert!(e.message.contains("limits"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10), "{name}: {:?}", started.elapsed());
    }
    // Expanded, the document would need gigabytes; the whole test process stays small.
    if let Some(peak) = peak_rss_bytes() {
        assert!(peak < 1 << 30, "peak RSS {peak} bytes");
    }
}

#[test]
fn yaml_nesting_is_bounded() {
    let deep_flow = format!(
        "lockfileVersion: '9.0'\npackages:\n  a@1.0.0: {{x: {}{}}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let deep_maps =
        format!("lockfileVersion: '9.0'\nsettings: {}1{}\n", "{a: ".repeat(100_000), "}".repeat(100_000));
    // Block sequences nested on one line: `- - - ... x`.
    let deep_block = format!("lockfileVersion: '9.0'\nimporters:\n  x:\n    {}x\n", "- ".repeat(100_000));
    let deep_berry = format!(
        "__metadata:\n  version: 8\n\"a@npm:1\":\n  x: {}1{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for (name, doc) in [(PNPM, deep_flow), (PNPM, deep_maps), (PNPM, deep_block), (YARN, deep_berry)] {
        let started = Instant::now();
        let e = err(name, &doc);
        assert_eq!(e.code, ParseErrorCode::Syntax, "{e}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }
}

#[test]
fn wrong_format_for_name_and_bad_bytes() {
    // JSON in a yarn.lock, YAML in a package-lock.json.
    let e = err(YARN, r#"{"lockfileVersion": 3, "packages": {}}"#);
    assert_eq!(e.code, ParseErrorCode::FormatMismatch);
    assert_eq!(err(PKG, "lockfileVersion: '9.0'\n").code, ParseErrorCode::FormatMismatch);
    assert_eq!(err(YARN, "just some text\n").code, ParseErrorCode::FormatMismatch);
    for name in [PKG, YARN, PNPM, "npm-shrinkwrap.json"] {
        let mut bytes =
            b"{\"lockfileVersion\": 3,\n\"packages\": {\"node_modules/a\": {\"version\": \"1.0.0".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, b'"', b'}', b'}', b'}']);
        let e = parse(name, &bytes).expect_err("invalid UTF-8");
        assert_eq!((e.code, e.line), (ParseErrorCode::InvalidUtf8, Some(2)), "{name}");
    }
    // A byte-order mark is not content.
    let p = ok(
        PKG,
        "\u{feff}{\"lockfileVersion\": 3, \"packages\": {\"node_modules/a\": {\"version\": \"1.0.0\"}}}",
    );
    assert_versions(&p, &[("a", &["1.0.0"])]);
}

#[test]
fn error_messages_do_not_echo_content() {
    let secret = "s3cr3t-token-value";
    let cases = [
        (
            PKG,
            format!(
                "{{\"lockfileVersion\": 3, \"packages\": {{\"node_modules/a\": {{\"version\": [\"{secret}\"]}}}}}}"
            ),
        ),
        (PNPM, format!("lockfileVersion: '9.0'\npackages:\n  a@1.0.0:\n    version: [\"{secret}\"]\n")),
        (PNPM, format!("lockfileVersion: '9.0'\npackages:\n  '{secret}': {{}}\n  '{secret}': {{}}\n")),
        (YARN, format!("{V1}a@^1:\n  version \"{secret}\n")),
        (YARN, format!("{BERRY}\"a@npm:1\":\n  resolution: \"{secret}\"\n")),
    ];
    for (name, text) in cases {
        let e = err(name, &text);
        assert!(!e.message.contains(secret) && !e.to_string().contains(secret), "{e}");
    }
}

// ------------------------------------------------------------------ proptest

mod props {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const SMALL: [(&str, &str); 5] = [
        (
            "package-lock.json",
            r#"{"lockfileVersion": 3, "packages": {"": {"name": "r"}, "node_modules/a": {"version": "1.0.0", "resolved": "https://r.test/a/-/a-1.0.0.tgz"}, "node_modules/b": {"name": "c", "version": "2.0.0"}, "node_modules/l": {"link": true}}}"#,
        ),
        (
            "package-lock.json",
            r#"{"lockfileVersion": 1, "dependencies": {"a": {"version": "npm:b@1.0.0", "dependencies": {"c": {"version": "git+ssh://g/c.git#1"}}}}}"#,
        ),
        (
            "yarn.lock",
            "# yarn lockfile v1\n\n\"a@^1\", \"b@npm:c@^2\":\n  version \"1.0.0\"\n  resolved \"https://r.test/a.tgz\"\n  dependencies:\n    d \"^1\"\n\ne@user/e#1:\n  version \"2.0.0\"\n",
        ),
        (
            "yarn.lock",
            "__metadata:\n  version: 8\n  cacheKey: 10c0\n\n\"a@npm:^1\":\n  version: 1.0.0\n  resolution: \"a@npm:1.0.0\"\n\n\"b@patch:b@npm%3A2.0.0#p\":\n  version: 2.0.0\n  resolution: \"b@patch:b@npm%3A2.0.0#p::version=2.0.0\"\n",
        ),
        (
            "pnpm-lock.yaml",
            "lockfileVersion: '6.0'\n\npackages:\n\n  /a@1.0.0(b@2.0.0):\n    resolution: {integrity: sha512-x}\n\n  /@s/c@3.0.0:\n    resolution: {directory: ../c, type: directory}\n",
        ),
    ];

    /// Checks one parse: a success keeps the invariants, a failure names the
    /// file, a line inside it, and one of the codes a lockfile parse can
    /// give without includes.
    fn check(name: &str, bytes: &[u8]) -> Option<Parsed> {
        match parse(name, bytes) {
            Ok(p) => {
                assert!(p.packages.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
                for pk in &p.packages {
                    assert!(!pk.name.is_empty() && !pk.name.contains(['\n', '\0']), "{pk:?}");
                    assert!(!pk.version.contains([':', '/', '\n']), "{pk:?}");
                    assert!(pk.commit.as_deref().is_none_or(gatehouse_deps::package::is_commit), "{pk:?}");
                }
                Some(p)
            }
            Err(e) => {
                assert_eq!(e.file, name);
                // YAML also ends a line at a lone CR: count both, an upper bound.
                let lines = bytes.iter().filter(|&&b| b == b'\n' || b == b'\r').count() + 1;
                assert!(e.line.is_none_or(|l| (1..=lines).contains(&l)), "{e}");
                use ParseErrorCode as C;
                assert!(
                    matches!(
                        e.code,
                        C::FormatMismatch | C::InvalidUtf8 | C::Syntax | C::Structure | C::UnsupportedVersion
                    ),
                    "{e}"
                );
                None
            }
        }
    }

    /// One generated package: a name, a registry version, and a commit for a git one.
    #[derive(Debug, Clone)]
    struct Gen {
        version: String,
        commit: Option<String>,
    }

    fn packages() -> impl Strategy<Value = BTreeMap<String, Gen>> {
        let name = "(@[a-z]{1,4}/)?[a-z][a-z0-9-]{0,8}";
        let version =
            "(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})(-rc\\.[1-9])?(\\+git)?";
        let commit = proptest::option::of("[0-9a-f]{40}");
        let entry = (version, commit).prop_map(|(version, commit)| Gen { version, commit });
        proptest::collection::btree_map(name, entry, 1..8)
    }

    /// `packages` written in one of four formats, as each package manager writes it.
    fn render(which: usize, packages: &BTreeMap<String, Gen>) -> (&'static str, String) {
        let mut out = String::new();
        let repo = |n: &str| format!("github.com/x/{}", n.replace(['@', '/'], ""));
        match which {
            0 => {
                out.push_str("{\"lockfileVersion\": 3, \"packages\": {\"\": {\"name\": \"root\"}");
                for (n, g) in packages {
                    let resolved = match &g.commit {
                        Some(c) => format!("git+ssh://git@{}.git#{c}", repo(n)),
                        None => format!("https://registry.npm.invalid/{n}/-/x-{}.tgz", g.version),
                    };
                    out.push_str(&format!(
                        ",\n\"node_modules/{n}\": {{\"version\": \"{}\", \"resolved\": \"{resolved}\"}}",
                        g.version
                    ));
                }
                out.push_str("}}\n");
                ("package-lock.json", out)
            }
            1 => {
                out.push_str("# yarn lockfile v1\n\n");
                for (n, g) in packages {
                    let (spec, resolved) = match &g.commit {
                        Some(c) => {
                            (format!("https://{}.git", repo(n)), format!("git+https://{}.git#{c}", repo(n)))
                        }
                        None => (format!("^{}", g.version), format!("https://registry.yarn.invalid/{n}.tgz")),
                    };
                    out.push_str(&format!(
                        "\"{n}@{spec}\":\n  version \"{}\"\n  resolved \"{resolved}\"\n\n",
                        g.version
                    ));
                }
                ("yarn.lock", out)
            }
            2 => {
                out.push_str("__metadata:\n  version: 8\n  cacheKey: 10c0\n\n");
                for (n, g) in packages {
                    let resolution = match &g.commit {
                        Some(c) => format!("{n}@https://{}.git#commit={c}", repo(n)),
                        None => format!("{n}@npm:{}", g.version),
                    };
                    out.push_str(&format!(
                        "\"{n}@npm:^{v}\":\n  version: {v}\n  resolution: \"{resolution}\"\n\n",
                        v = g.version
                    ));
                }
                ("yarn.lock", out)
            }
            _ => {
                out.push_str("lockfileVersion: '9.0'\n\npackages:\n\n");
                for (n, g) in packages {
                    match &g.commit {
                        Some(c) => out.push_str(&format!(
                            "  '{n}@git+https://{r}.git#{c}':\n    resolution: {{commit: {c}, repo: 'https://{r}.git', type: git}}\n    version: {v}\n\n",
                            r = repo(n),
                            v = g.version
                        )),
                        None => out.push_str(&format!(
                            "  '{n}@{}':\n    resolution: {{integrity: sha512-x}}\n\n",
                            g.version
                        )),
                    }
                }
                ("pnpm-lock.yaml", out)
            }
        }
    }

    fn expected(packages: &BTreeMap<String, Gen>) -> Vec<(String, String, Option<String>)> {
        packages.iter().map(|(n, g)| (n.clone(), g.version.clone(), g.commit.clone())).collect()
    }

    fn got(p: &Parsed) -> Vec<(String, String, Option<String>)> {
        p.packages.iter().map(|pk| (pk.name.clone(), pk.version.clone(), pk.commit.clone())).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Generated lockfiles of every format read back exactly: each
        /// package with its version (build metadata kept) and, for a git
        /// one, its commit; a byte order mark and CRLF line ends change nothing.
        #[test]
        fn generated_lockfiles_read_back_exactly(
            packages in packages(), which in 0usize..4, crlf in any::<bool>(), bom in any::<bool>(),
        ) {
            let (name, mut text) = render(which, &packages);
            if crlf {
                text = text.replace('\n', "\r\n");
            }
            if bom {
                text.insert(0, '\u{feff}');
            }
            let parsed = check(name, text.as_bytes());
            prop_assert!(parsed.is_some(), "{name} did not parse:\n{text}");
            prop_assert_eq!(got(&parsed.unwrap_or_else(|| unreachable!())), expected(&packages));
        }

        /// A generated lockfile cut anywhere is an error from the list, or
        /// lists only packages it was generated with: a cut never invents one.
        #[test]
        fn truncated_lockfiles_never_invent_packages(
            packages in packages(), which in 0usize..4, cut in any::<prop::sample::Index>(),
        ) {
            let (name, text) = render(which, &packages);
            let want = expected(&packages);
            if let Some(p) = check(name, &text.as_bytes()[..cut.index(text.len() + 1)]) {
                // A cut may drop a git dependency's `resolved` line, or end an
                // unquoted YAML `version:` early (a prefix of the version).
                for (n, v, c) in got(&p) {
                    let known = want.iter().any(|(wn, wv, wc)| {
                        *wn == n && (*wv == v || wc.is_some() && wv.starts_with(&v)) && (c.is_none() || *wc == c)
                    });
                    prop_assert!(known, "{n}@{v} ({c:?}) from a cut {name}");
                }
            }
        }

        /// A NUL byte anywhere in a generated lockfile is refused at its line.
        #[test]
        fn nul_bytes_are_refused_where_they_are(
            packages in packages(), which in 0usize..4, at in any::<prop::sample::Index>(),
        ) {
            let (name, text) = render(which, &packages);
            let mut bytes = text.into_bytes();
            let at = at.index(bytes.len());
            bytes.insert(at, 0);
            let e = parse(name, &bytes).expect_err("a NUL byte");
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            prop_assert_eq!((e.code, e.line), (ParseErrorCode::Syntax, Some(line)));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for name in ["package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml"] {
                check(name, &bytes);
            }
        }

        #[test]
        fn mutated_lockfiles_never_panic(
            which in 0usize..SMALL.len(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let (name, text) = SMALL[which];
            let mut bytes = text.as_bytes().to_vec();
            for (at, byte, op) in edits {
                let i = at.index(bytes.len().max(1));
                match op {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i.min(bytes.len()), byte),
                    _ => bytes.truncate(i),
                }
            }
            check(name, &bytes);
        }
    }

    #[test]
    fn small_lockfiles_parse() {
        let counts: Vec<usize> = SMALL.iter().map(|(name, text)| ok(name, text).packages.len()).collect();
        // The v1 git dependency `c` and yarn's `e@user/e#1` are packages too.
        assert_eq!(counts, [2, 2, 3, 2, 1]);
    }
}
