//! requirements.txt, poetry.lock, go.sum, Cargo.lock and Gemfile.lock: the
//! real fixtures under `tests/fixtures/` (see each format's `SOURCES.md`),
//! peer-project fixtures, inline edge cases for every rule, and property
//! tests that no input panics.
//!
//! Expected counts come from commands independent of the parsers (quoted in
//! comments, run from `tests/fixtures/`), never from the parsers' output.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gatehouse_deps::lockfile::{Format, ParseError, ParseErrorCode, Parsed, parse, parse_file, parse_with};
use gatehouse_deps::package::{Ecosystem, Package};
use proptest::prelude::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Parses a fixture under its own (original) file name.
fn parse_fixture(rel: &str) -> Parsed {
    parse(rel, &read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Parses a fixture under another file name (peer fixtures have test names).
fn parse_as(name: &str, rel: &str) -> Result<Parsed, ParseError> {
    parse(name, &read(rel))
}

fn ok(name: &str, text: &str) -> Parsed {
    parse(name, text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
}

fn err(name: &str, text: &str) -> ParseError {
    match parse(name, text.as_bytes()) {
        Ok(p) => panic!("{name}: expected an error, got {p:?}"),
        Err(e) => e,
    }
}

fn pairs(p: &Parsed) -> BTreeSet<(String, String)> {
    p.packages.iter().map(|p| (p.name.clone(), p.version.clone())).collect()
}

fn pairs_of(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
}

#[track_caller]
fn assert_has(p: &Parsed, want: &[(&str, &str)]) {
    let got = pairs(p);
    for (n, v) in want {
        assert!(got.contains(&((*n).to_owned(), (*v).to_owned())), "missing {n} {v}");
    }
}

#[track_caller]
fn assert_lacks(p: &Parsed, unwanted: &[(&str, &str)]) {
    let got = pairs(p);
    for (n, v) in unwanted {
        assert!(!got.contains(&((*n).to_owned(), (*v).to_owned())), "unexpected {n} {v}");
    }
}

#[track_caller]
fn assert_no_name(p: &Parsed, name: &str) {
    assert!(p.packages.iter().all(|p| p.name != name), "unexpected package {name}");
}

#[track_caller]
fn assert_exactly(p: &Parsed, want: &[(&str, &str)]) {
    assert_eq!(pairs(p), pairs_of(want));
}

#[track_caller]
fn assert_err(e: &ParseError, code: ParseErrorCode, line: Option<usize>) {
    assert_eq!((e.code, e.line), (code, line), "{e}");
}

/// Sorted, unique, non-empty, in one ecosystem: what every parse returns.
#[track_caller]
fn assert_well_formed(p: &Parsed) {
    let eco = p.format.ecosystem();
    assert!(p.packages.windows(2).all(|w| w[0] < w[1]), "not sorted and unique");
    for pkg in &p.packages {
        assert_eq!(pkg.ecosystem, eco);
        assert!(!pkg.name.is_empty() && !pkg.version.is_empty(), "{pkg:?}");
        let commit = pkg.commit.as_deref();
        assert_eq!(
            *pkg,
            Package::new(eco, &pkg.name, &pkg.version).at_commit(commit),
            "not normalized: {pkg:?}"
        );
    }
}

fn warnings(p: &Parsed, code: &str) -> Vec<Option<usize>> {
    p.warnings.iter().filter(|w| w.code == code).map(|w| w.line).collect()
}

/// An includes callback reading files from `dir`, recording the names asked for.
fn disk(dir: PathBuf, asked: &mut Vec<String>) -> impl FnMut(&str) -> Result<String, String> + '_ {
    move |name: &str| {
        asked.push(name.to_owned());
        std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string())
    }
}

/// An includes callback serving files from a list.
fn files<'a>(
    list: &'a [(&'a str, &'a str)],
    asked: &'a mut Vec<String>,
) -> impl FnMut(&str) -> Result<String, String> + 'a {
    move |name: &str| {
        asked.push(name.to_owned());
        list.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| (*t).to_owned())
            .ok_or_else(|| format!("no {name}"))
    }
}

// ---------------------------------------------------------------- requirements.txt

#[test]
fn requirements_warehouse_main_hashes() {
    // grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^]]*\])? *===? *[0-9]' F | sed -E 's/\[[^]]*\]//; s/ *(;|\\).*$//; s/ *===? */ /' \
    //   | awk '{n=tolower($1); gsub(/[-_.]+/,"-",n); print n" "$2}' | sort -u | wc -l   => 184
    let p = parse_fixture("requirements/warehouse-main-hashes/requirements.txt");
    assert_eq!(p.format, Format::Requirements);
    assert_eq!(p.packages.len(), 184);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_has(
        &p,
        &[
            ("alembic", "1.18.5"),
            ("cattrs", "26.1.0"),
            ("celery", "5.6.3"), // celery[redis]==5.6.3
            ("click-plugins", "1.1.1.2"),
            ("cssutils", "2.15.0"),
            ("google-cloud-core", "2.6.0"),
            ("itsdangerous", "2.2.0"),
            ("pydantic", "2.13.4"), // pydantic[email]
            ("pyramid-redirect", "0.4"),
            ("ua-parser-builtins", "202606"),
            ("zope-interface", "8.5"),
            ("zxcvbn", "4.5.0"),
            ("setuptools", "81.0.0"), // after "unsafe in a requirements file"
        ],
    );
    assert_no_name(&p, "celery[redis]");
    assert_well_formed(&p);
}

#[test]
fn requirements_warehouse_deploy_2017_normalizes_names() {
    // same command => 13
    let p = parse_fixture("requirements/warehouse-deploy-2017/requirements.txt");
    assert_eq!(p.packages.len(), 13);
    assert_has(
        &p,
        &[
            ("twisted", "17.5.0"),       // Twisted[http2]==17.5.0
            ("zope-interface", "4.4.2"), // zope.interface
            ("automat", "0.6.0"),        // Automat
            ("constantly", "15.1.0"),
            ("h2", "3.0.1"),
            ("hyperlink", "17.2.1"),
            ("attrs", "17.2.0"),
            ("six", "1.10.0"),
        ],
    );
    assert_no_name(&p, "Twisted");
    assert_no_name(&p, "zope.interface");
    assert!(p.warnings.is_empty());
}

#[test]
fn requirements_certbot_markers_yield_every_pinned_version() {
    // same command => 191 (every line is `name==version ; markers`)
    let p = parse_fixture("requirements/certbot-markers/requirements.txt");
    assert_eq!(p.packages.len(), 191);
    assert_has(
        &p,
        &[
            ("cython", "0.29.37"),
            ("cython", "3.2.5"),
            ("docutils", "0.21.2"),
            ("docutils", "0.22.4"),
            ("ipython", "8.39.0"),
            ("ipython", "9.14.1"),
            ("sphinx", "8.1.3"),
            ("sphinx", "9.0.4"),
            ("sphinx", "9.1.0"),
            ("alabaster", "1.0.0"),
            ("dns-lexicon", "3.25.2"),
            ("backports-tarfile", "1.2.0"),
        ],
    );
    assert!(p.warnings.is_empty());
    assert_well_formed(&p);
}

#[test]
fn requirements_sigstore_hashes() {
    // same command => 32
    let p = parse_fixture("requirements/sigstore-install-hashes/requirements.txt");
    assert_eq!(p.packages.len(), 32);
    assert_has(
        &p,
        &[
            ("annotated-types", "0.8.0"),
            ("cryptography", "50.0.0"),
            ("idna", "3.18"),
            ("platformdirs", "4.11.2"),
            ("pydantic-core", "2.46.4"),
            ("requests", "2.34.2"),
            ("securesystemslib", "1.4.0"),
            ("tuf", "7.0.0"),
        ],
    );
}

#[test]
fn requirements_pins_extras_and_exact_operators() {
    let p = ok(
        "requirements.txt",
        "pyjwt [crypto] == 2.1.0\ncelery [redis, pytest] == 4.4.7\nyolo===1.0\nA.B_c==1.0\nspaced == 2.0\n\
         paren (==3.0)\nlocal==1.0+abc.1\nepoch==1!2.0\n",
    );
    assert_exactly(
        &p,
        &[
            ("pyjwt", "2.1.0"),
            ("celery", "4.4.7"),
            ("yolo", "1.0"),
            ("a-b-c", "1.0"),
            ("spaced", "2.0"),
            ("paren", "3.0"),
            ("local", "1.0+abc.1"),
            ("epoch", "1!2.0"),
        ],
    );
    assert!(p.warnings.is_empty());
}

#[test]
fn requirements_markers_do_not_hide_versions() {
    let p = ok(
        "requirements.txt",
        "ipython==8.0.0 ; python_version < \"3.10\"\nipython==9.0.0; python_version >= \"3.10\"\n\
         foo==1.0; sys_platform == 'win32' --hash=sha256:abc\n",
    );
    assert_exactly(&p, &[("ipython", "8.0.0"), ("ipython", "9.0.0"), ("foo", "1.0")]);
}

#[test]
fn requirements_hashes_and_continuations() {
    let text = "# header\n\nFooProject == 1.2 \\\n  --hash=sha256:2cf2 \\\n  --hash=sha256:486e\n\
                boto3==1.26.121 --hash=sha256:f87d\nbar==2.0 --hash sha256:1 --global-option=x -C y\n\
                qwerty \\\n  == 0.1\nlast==3.0 \\";
    let p = ok("requirements.txt", text);
    assert_exactly(
        &p,
        &[("fooproject", "1.2"), ("boto3", "1.26.121"), ("bar", "2.0"), ("qwerty", "0.1"), ("last", "3.0")],
    );
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn requirements_continuation_edge_cases_follow_pip() {
    // osv-scanner's line-continuation.txt: backslashes stripped at both ends of
    // a continued line, and a comment swallows the line continued into it.
    let p = parse_as("requirements.txt", "requirements/peer-osv-scanner/pip/line-continuation.txt").unwrap();
    assert_exactly(&p, &[("foo", "1.2.3"), ("bar", "4.5.6"), ("baz", "7.8.9"), ("qux", "10.11.12")]);
    // A whole-line comment ending in `\` does not continue.
    let p = ok("requirements.txt", "# note \\\nfoo==1.0\n");
    assert_exactly(&p, &[("foo", "1.0")]);
}

#[test]
fn requirements_comments_and_blank_lines() {
    let p = ok(
        "requirements.txt",
        "# comment\n   # indented comment\n\n\t\nfoo==1.0 # trailing\nbar==2.0\t#tab\n\
         git+https://example.invalid/x.git#egg=x\n",
    );
    assert_exactly(&p, &[("foo", "1.0"), ("bar", "2.0")]);
    // `#` not after whitespace is not a comment: `1.0#x` is not a version.
    let e = err("requirements.txt", "ok==1.0\nfoo==1.0#x\n");
    assert_err(&e, ParseErrorCode::Syntax, Some(2));
}

#[test]
fn requirements_options_lines_are_skipped() {
    let p = ok(
        "requirements.txt",
        "--index-url https://pypi.invalid/simple\n-i https://pypi.invalid/simple\n\
         --extra-index-url=https://x.invalid\n--find-links ./wheels\n-f ./wheels\n--trusted-host x.invalid\n\
         --pre\n--no-binary :all:\n--only-binary=:none:\n--prefer-binary\n--require-hashes\n--no-index\n\
         --use-feature=truststore\nfoo==1.0\n",
    );
    assert_exactly(&p, &[("foo", "1.0")]);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // An option pip does not accept is skipped, and said so.
    let p = ok("requirements.txt", "--frobnicate\nfoo==1.0\n");
    assert_eq!(warnings(&p, "unsupported_option"), [Some(1)]);
    // A valued option without its value is malformed.
    assert_err(&err("requirements.txt", "foo==1.0\n--index-url\n"), ParseErrorCode::Syntax, Some(2));
}

#[test]
fn requirements_unpinned_are_warned_with_their_line() {
    let text = "a>=1.0\nb~=1.1\nc>=1,<2\nd\ne==1.*\nf!=3.5\n\
                u @ https://example.invalid/u-1.0.zip\n./downloads/numpy-1.9.2-cp34-none-win32.whl\n\
                https://example.invalid/pkg-1.0.tar.gz\n-e git+https://example.invalid/x.git#egg=x\n\
                --editable ./local\n../sibling\nv==${VERSION}\npinned==1.0\n";
    let p = ok("requirements.txt", text);
    assert_exactly(&p, &[("pinned", "1.0")]);
    let lines: Vec<Option<usize>> = (1..=13).map(Some).collect();
    assert_eq!(warnings(&p, "unpinned"), lines);
    assert!(p.warnings.iter().all(|w| !w.message.contains("example.invalid")), "URLs are not echoed");
}

#[test]
fn requirements_garbage_is_an_error_not_an_empty_list() {
    for (text, line) in [
        ("asdf==\n", 1),
        ("==1.0\n", 1),
        ("ok==1\nasdf 1.0\n", 2),
        ("foo7==1.0 junk --hash=sha256:1\n", 1),
        ("This is not a requirements file, just prose.\n", 1),
        ("{\"a\": 1}\n", 1),
        ("foo[bar==1.0\n", 1),
    ] {
        assert_err(&err("requirements.txt", text), ParseErrorCode::Syntax, Some(line));
    }
    // Joined lines report their first line.
    assert_err(&err("requirements.txt", "ok==1\n\nbad \\\n  ==\n"), ParseErrorCode::Syntax, Some(3));
}

#[test]
fn requirements_empty_files_are_empty() {
    for text in ["", "\n\n", "# only\n# comments\n", "--index-url https://pypi.invalid/simple\n"] {
        let p = ok("requirements.txt", text);
        assert!(p.packages.is_empty() && p.warnings.is_empty(), "{text:?}");
    }
    // CRLF line endings and a BOM.
    let p = ok("requirements.txt", "\u{feff}foo==1.0\r\nbar==2.0 \\\r\n  --hash=sha256:1\r\n");
    assert_exactly(&p, &[("foo", "1.0"), ("bar", "2.0")]);
}

#[test]
fn requirements_peer_scalibr_fixtures() {
    let parse_peer = |f: &str| parse_as("requirements.txt", &format!("requirements/peer-scalibr/{f}"));
    // Read by hand from each file.
    assert_exactly(
        &parse_peer("comments.txt").unwrap(),
        &[("pycrypto", "1.2-alpha"), ("gmpy2", "1"), ("sympy", "1.2"), ("requests", "1.0"), ("six", "1.2")],
    );
    assert_exactly(&parse_peer("extras.txt").unwrap(), &[("pyjwt", "2.1.0"), ("celery", "4.4.7")]);
    assert_exactly(&parse_peer("multiline_and_comments.txt").unwrap(), &[("pkga", "1.0"), ("pkgb", "2.0")]);
    assert_exactly(&parse_peer("trailing_backslash.txt").unwrap(), &[("pkg1", "1.0")]);
    let p = parse_peer("no_version.txt").unwrap();
    assert!(p.packages.is_empty());
    assert_eq!(warnings(&p, "unpinned"), [Some(1), Some(2), Some(3)]);
    let p = parse_peer("env_var.txt").unwrap();
    assert_exactly(&p, &[("asdf", "1.2"), ("another", "1.0")]);
    assert_eq!(warnings(&p, "unpinned"), [Some(2)]);
    let p = parse_peer("with_versions.txt").unwrap();
    assert_exactly(
        &p,
        &[
            ("nltk", "3.2.2"),
            ("tabulate", "0.7.7"),
            ("qwerty", "0.1"),
            ("hy-phen", "1.2"),
            ("under-score", "1.3"),
            ("pkg-dot-name", "5.0.0"),
            ("yolo", "1.0"),
        ],
    );
    assert_eq!(warnings(&p, "unpinned"), [Some(3), Some(4), Some(10), Some(12)]);
    // `asdf==` on line 1: pip refuses the file, so does the parser.
    assert_err(&parse_peer("invalid.txt").unwrap_err(), ParseErrorCode::Syntax, Some(1));
    // `foo7==1.0 unexpected_text...` (line 13) is not a requirement pip accepts.
    assert_err(&parse_peer("per_req_options.txt").unwrap_err(), ParseErrorCode::Syntax, Some(13));
}

#[test]
fn requirements_peer_osv_scanner_fixtures() {
    let parse_peer =
        |f: &str| parse_as("requirements.txt", &format!("requirements/peer-osv-scanner/pip/{f}"));
    let p = parse_peer("multiple-packages-constrained.txt").unwrap();
    assert_eq!(p.packages.len(), 13); // grep -c '^[a-z].*==' => 13
    assert!(p.warnings.is_empty());
    let p = parse_peer("multiple-packages-mixed.txt").unwrap();
    assert_exactly(&p, &[("pandas", "0.23.4"), ("numpy", "1.16.0"), ("scikit-learn", "0.20.1")]);
    assert_eq!(warnings(&p, "unpinned"), [Some(1), Some(2), Some(6), Some(7), Some(8)]);
    let p = parse_peer("non-normalized-names.txt").unwrap();
    assert_exactly(&p, &[("zope-interface", "5.4.0"), ("pillow", "1.0.0"), ("twisted", "20.3.0")]);
    let p = parse_peer("with-per-requirement-options.txt").unwrap();
    assert_exactly(&p, &[("boto3", "1.26.121"), ("foo", "1.0.0"), ("fooproject", "1.2")]);
    assert_eq!(warnings(&p, "unpinned"), [Some(12)]);
    for f in ["empty.txt", "only-comments.txt"] {
        let p = parse_peer(f).unwrap();
        assert!(p.packages.is_empty() && p.warnings.is_empty(), "{f}");
    }
    assert_eq!(warnings(&parse_peer("one-package-unconstrained.txt").unwrap(), "unpinned"), [Some(1)]);
}

#[test]
fn requirements_includes_read_through_the_callback() {
    let dir = fixtures().join("requirements/peer-osv-scanner/pip");
    let run = |f: &str, asked: &mut Vec<String>| {
        let bytes = std::fs::read(dir.join(f)).unwrap();
        let mut read = disk(dir.clone(), asked);
        // Named `requirements.txt` so that it is detected as one.
        parse_with("requirements.txt", &bytes, Some(&mut read))
    };
    let mut asked = Vec::new();
    let p = run("with-multiple-r-options.txt", &mut asked).unwrap();
    assert_eq!(asked, ["./one-package-constrained.txt", "./multiple-packages-mixed.txt"]);
    assert_exactly(
        &p,
        &[
            ("django", "2.2.24"),
            ("pandas", "0.23.4"),
            ("numpy", "1.16.0"),
            ("scikit-learn", "0.20.1"),
            ("requests", "1.2.3"),
        ],
    );
    // Warnings from an included file name it.
    assert!(p.warnings.iter().any(|w| w.message.starts_with("./multiple-packages-mixed.txt: ")));

    // A diamond: duplicate-r-base.txt is included twice and read twice, parsed once.
    let mut asked = Vec::new();
    let p = run("duplicate-r-dev.txt", &mut asked).unwrap();
    assert_exactly(
        &p,
        &[("django", "0.1.0"), ("pandas", "0.23.4"), ("requests", "1.2.3"), ("unittest", "1.0.0")],
    );
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    let mut asked = Vec::new();
    let p = run("file-format-example.txt", &mut asked).unwrap();
    assert_eq!(asked, ["other-file.txt"]);
    assert_exactly(&p, &[("docopt", "0.6.1"), ("django", "2.2.24")]);
    // pytest, pytest-cov, beautifulsoup4, keyring, coverage, Mopidy-Dirble, the .whl, the URL, rejected, green
    assert_eq!(warnings(&p, "unpinned").len(), 10);

    // A missing include fails, at its line.
    let mut asked = Vec::new();
    let e = run("with-bad-r-option.txt", &mut asked).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(3));
    assert_eq!(e.file, "requirements.txt");
}

#[test]
fn requirements_include_cycles_end() {
    let dir = fixtures().join("requirements/peer-osv-scanner/pip");
    // The top-level file is named `requirements.txt` (so that it is detected as
    // one); its copy read as ./cyclic-r-self.txt then includes itself.
    let mut asked = Vec::new();
    let bytes = std::fs::read(dir.join("cyclic-r-self.txt")).unwrap();
    let p = parse_with("requirements.txt", &bytes, Some(&mut disk(dir.clone(), &mut asked))).unwrap();
    assert_exactly(&p, &[("requests", "1.2.3"), ("pandas", "0.23.4")]);
    assert_eq!(asked, ["./cyclic-r-self.txt", "cyclic-r-self.txt"]);
    assert_eq!(warnings(&p, "include_cycle"), [Some(1)]);
    assert!(p.warnings.iter().all(|w| w.message.starts_with("./cyclic-r-self.txt")), "{:?}", p.warnings);

    // 1 -> 2 -> ../pip/1 (the same file by another name) -> ...: `..` climbs
    // out of the lockfile's directory, so only a root one level up reads it.
    let mut asked = Vec::new();
    let bytes = std::fs::read(dir.join("cyclic-r-complex-1.txt")).unwrap();
    let e = parse_with("requirements.txt", &bytes, Some(&mut disk(dir.clone(), &mut asked))).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    assert_eq!(
        (e.file.as_str(), asked.as_slice()),
        ("./cyclic-r-complex-2.txt", &["./cyclic-r-complex-2.txt".to_owned()][..])
    );
    let tmp = tempfile::tempdir().unwrap();
    let pip = tmp.path().join("pip");
    std::fs::create_dir(&pip).unwrap();
    for f in ["cyclic-r-complex-1.txt", "cyclic-r-complex-2.txt", "cyclic-r-complex-3.txt"] {
        std::fs::copy(dir.join(f), pip.join(f)).unwrap();
    }
    std::fs::write(pip.join("requirements.txt"), &bytes).unwrap();
    let p = parse_file(&pip.join("requirements.txt"), &bytes, Some(tmp.path())).unwrap();
    assert_exactly(&p, &[("cyclic-r-complex", "1"), ("cyclic-r-complex", "2"), ("cyclic-r-complex", "3")]);

    // A file named by a full path that includes itself by its relative name.
    let full = dir.join("requirements.txt");
    let mut read = |name: &str| -> Result<String, String> {
        assert_eq!(name, "./requirements.txt");
        Ok("-r ./requirements.txt\nx==1\n".to_owned())
    };
    let p = parse_with(&full.to_string_lossy(), b"-r ./requirements.txt\nx==1\n", Some(&mut read)).unwrap();
    assert_exactly(&p, &[("x", "1")]);
    assert_eq!(warnings(&p, "include_cycle"), [Some(1)]);
}

#[test]
fn requirements_include_forms_and_nested_paths() {
    let list = [
        ("a.txt", "a==1\n"),
        ("b.txt", "b==1\n"),
        ("c.txt", "c==1\n"),
        ("d.txt", "d==1\n"),
        ("e.txt", "e==1\n"),
        ("sub/f.txt", "f==1\n-r g.txt\n-c ../h.txt\n"),
        ("sub/g.txt", "g==1\n"),
        ("sub/../h.txt", "h==1\n"),
    ];
    let text = "-r a.txt\n-rb.txt\n--requirement c.txt\n--requirement=d.txt\n-c e.txt\n\
                --constraint sub/f.txt\n";
    let mut asked = Vec::new();
    let p = parse_with("requirements.txt", text.as_bytes(), Some(&mut files(&list, &mut asked))).unwrap();
    assert_eq!(
        asked,
        ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "sub/f.txt", "sub/g.txt", "sub/../h.txt"]
    );
    // e, f and h appear only in constraints files: not packages. g is
    // included with `-r` from a constraints file: a requirement, as pip reads it.
    let want: Vec<(&str, &str)> = ["a", "b", "c", "d", "g"].iter().map(|n| (*n, "1")).collect();
    assert_exactly(&p, &want);
}

#[test]
fn requirements_include_failures() {
    // No callback.
    let e = err("requirements.txt", "foo==1\n\n-r other.txt\n");
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(3));
    assert!(e.message.contains("other.txt"), "{e}");
    // The callback fails.
    let mut read = |_: &str| -> Result<String, String> { Err("permission denied".into()) };
    let e = parse_with("requirements.txt", b"-r more.txt\n", Some(&mut read)).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(1));
    assert!(e.message.contains("permission denied"), "{e}");
    // A constraints file that cannot be read is a warning: it only pins.
    let p = parse_with("requirements.txt", b"-c constraints.txt\nflask\n", Some(&mut read)).unwrap();
    assert_eq!(warnings(&p, "constraints_not_read"), [Some(1)]);
    assert!(p.warnings[0].message.contains("permission denied"), "{:?}", p.warnings);
    assert_eq!(warnings(&p, "unpinned"), [Some(2)]);
    // `-r` without a file.
    assert_err(&err("requirements.txt", "-r\n"), ParseErrorCode::Syntax, Some(1));
    // An error inside an included file names that file and its line.
    let list = [("bad.txt", "ok==1\nfoo==\n")];
    let mut asked = Vec::new();
    let e = parse_with("requirements.txt", b"-r bad.txt\n", Some(&mut files(&list, &mut asked))).unwrap_err();
    assert_err(&e, ParseErrorCode::Syntax, Some(2));
    assert_eq!(e.file, "bad.txt");
}

#[test]
fn requirements_include_depth_is_limited() {
    // f0 -> f1 -> ... : each file pins its own package and includes the next.
    let chain = |n: usize| {
        move |name: &str| -> Result<String, String> {
            let i: usize =
                name.trim_start_matches('f').trim_end_matches(".txt").parse().map_err(|_| "bad name")?;
            Ok(if i < n { format!("p{i}==1\n-r f{}.txt\n", i + 1) } else { format!("p{i}==1\n") })
        }
    };
    // Ten levels of includes below the top-level file are fine.
    let p = parse_with("requirements.txt", b"-r f1.txt\n", Some(&mut chain(10))).unwrap();
    assert_eq!(p.packages.len(), 10);
    // Eleven are not.
    let e = parse_with("requirements.txt", b"-r f1.txt\n", Some(&mut chain(11))).unwrap_err();
    assert_eq!(e.code, ParseErrorCode::IncludeFailed, "{e}");
    assert_eq!((e.file.as_str(), e.line), ("f10.txt", Some(2)));
    // A file that includes itself under ever-new names ends at the same limit.
    // (The same normalized path, different content each time: read again.)
    let mut grow = |name: &str| -> Result<String, String> { Ok(format!("# {name}\nx==1\n-r d/../a.txt\n")) };
    let e = parse_with("requirements.txt", b"-r a.txt\n", Some(&mut grow)).unwrap_err();
    assert_eq!(e.code, ParseErrorCode::IncludeFailed);
}

#[test]
fn requirements_includes_outside_the_lockfiles_tree_are_refused_unread() {
    // Absolute paths (Unix and Windows forms), URLs, and `..` above the
    // lockfile's directory, in every option spelling.
    let outside = [
        "/etc/passwd",
        "../secret.txt",
        "./../secret.txt",
        "sub/../../secret.txt",
        "'..\\secret.txt'",
        "C:/Windows/win.ini",
        "'\\\\server\\share\\r.txt'",
        "https://example.com/r.txt",
        "file:///etc/passwd",
        "./C:/Windows/win.ini",
        "./https://example.com/r.txt",
    ];
    for written in outside {
        for option in
            ["-r ", "-r", "-c ", "--requirement ", "--requirement=", "--constraint ", "--constraint="]
        {
            let text = format!("ok==1\n{option}{written}\n");
            let mut asked = Vec::new();
            let mut read = |name: &str| -> Result<String, String> {
                asked.push(name.to_owned());
                Ok("stolen==1\n".to_owned())
            };
            let e = parse_with("requirements.txt", text.as_bytes(), Some(&mut read)).unwrap_err();
            assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(2));
            assert_eq!(e.code.as_str(), "include_outside_root");
            assert!(asked.is_empty(), "{text}: asked for {asked:?}");
            for leak in ["etc", "passwd", "secret", "Windows", "server", "example"] {
                assert!(!e.to_string().contains(leak), "{text}: the error names the target: {e}");
            }
        }
    }
    // An included file may not reach out either, even where the top-level file could.
    let list = [("sub/a.txt", "a==1\n-r ../b.txt\n-r ../../c.txt\n"), ("sub/../b.txt", "b==1\n")];
    let mut asked = Vec::new();
    let e =
        parse_with("requirements.txt", b"-r sub/a.txt\n", Some(&mut files(&list, &mut asked))).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(3));
    assert_eq!(e.file, "sub/a.txt");
    assert_eq!(asked, ["sub/a.txt", "sub/../b.txt"]);
}

/// A checkout in a temporary directory: `repo/` (the include root) next to
/// `elsewhere/`, which holds `secret.txt` and no `missing.txt`.
fn checkout() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let repo = tmp.path().join("repo");
    let made = std::fs::create_dir_all(repo.join("reqs"))
        .and_then(|()| std::fs::create_dir(tmp.path().join("elsewhere")))
        .and_then(|()| std::fs::write(tmp.path().join("elsewhere/secret.txt"), "stolen==1\n"))
        .and_then(|()| std::fs::write(repo.join("reqs/base.txt"), "base==1\n"));
    made.unwrap_or_else(|e| panic!("checkout: {e}"));
    (tmp, repo)
}

/// Writes `dir/requirements.txt` and parses it from disk.
fn parse_repo(dir: &Path, text: &str, root: Option<&Path>) -> Result<Parsed, ParseError> {
    let path = dir.join("requirements.txt");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_file(&path, text.as_bytes(), root)
}

#[cfg(unix)]
#[test]
fn requirements_include_symlinks_out_of_the_root_are_refused_alike() {
    use std::os::unix::fs::symlink;
    let (tmp, repo) = checkout();
    let elsewhere = tmp.path().join("elsewhere");
    symlink(elsewhere.join("secret.txt"), repo.join("abs-existing.txt")).unwrap();
    symlink(elsewhere.join("missing.txt"), repo.join("abs-missing.txt")).unwrap();
    symlink("../elsewhere/secret.txt", repo.join("rel-existing.txt")).unwrap();
    symlink("../elsewhere/missing.txt", repo.join("rel-missing.txt")).unwrap();
    symlink(&elsewhere, repo.join("outdir")).unwrap();
    // Leaves and comes back: still refused, at the link.
    symlink("../repo/reqs/base.txt", repo.join("round-trip.txt")).unwrap();
    symlink("reqs/../reqs/../../elsewhere/secret.txt", repo.join("nested.txt")).unwrap();
    std::fs::create_dir(repo.join("reqs/deeper")).unwrap();
    symlink("../../outdir/secret.txt", repo.join("reqs/deeper/chain.txt")).unwrap();

    let mut errors = Vec::new();
    for include in [
        "abs-existing.txt",
        "abs-missing.txt",
        "rel-existing.txt",
        "rel-missing.txt",
        "outdir/secret.txt",
        "outdir/missing.txt",
        "round-trip.txt",
        "nested.txt",
        "reqs/deeper/chain.txt",
        "../elsewhere/secret.txt",
        "../elsewhere/missing.txt",
    ] {
        let e = parse_repo(&repo, &format!("ok==1\n-r {include}\n"), None).unwrap_err();
        assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(2));
        for leak in ["elsewhere", "secret", "missing"] {
            assert!(!e.to_string().contains(leak), "{include}: {e}");
        }
        errors.push(e);
    }
    // Existing or not, by any route: one and the same error.
    assert!(errors.windows(2).all(|w| w[0] == w[1]), "{errors:#?}");

    // Links that stay inside are followed.
    symlink("reqs/base.txt", repo.join("inside.txt")).unwrap();
    symlink(repo.join("reqs"), repo.join("reqs-link")).unwrap();
    symlink("deeper/../base.txt", repo.join("reqs/dotdot.txt")).unwrap();
    let p = parse_repo(&repo, "-r inside.txt\n-r reqs-link/base.txt\n-c reqs/dotdot.txt\n", None).unwrap();
    assert_exactly(&p, &[("base", "1")]);
    // A link loop ends.
    symlink("loop-b.txt", repo.join("loop-a.txt")).unwrap();
    symlink("loop-a.txt", repo.join("loop-b.txt")).unwrap();
    let e = parse_repo(&repo, "-r loop-a.txt\n", None).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(1));
}

#[test]
fn requirements_includes_read_from_disk_stay_under_their_root() {
    let (tmp, repo) = checkout();
    // Inside: read, nested includes relative to the including file.
    std::fs::write(repo.join("reqs/dev.txt"), "-r base.txt\ndev==1\n").unwrap();
    let p = parse_repo(&repo, "-r reqs/dev.txt\n", None).unwrap();
    assert_exactly(&p, &[("base", "1"), ("dev", "1")]);
    // A missing file inside the root is an ordinary failure.
    let e = parse_repo(&repo, "-r reqs/none.txt\n", None).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(1));
    let e = parse_repo(&repo, "-r reqs\n", None).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeFailed, Some(1));
    // Outside, existing or not: the same refusal, nothing read.
    let a = parse_repo(&repo, "-r ../elsewhere/secret.txt\n", None).unwrap_err();
    let b = parse_repo(&repo, "-r ../elsewhere/missing.txt\n", None).unwrap_err();
    let c = parse_repo(&repo, &format!("-r {}\n", tmp.path().join("elsewhere/secret.txt").display()), None);
    assert_err(&a, ParseErrorCode::IncludeOutsideRoot, Some(1));
    assert_eq!(a, b);
    assert_eq!(c.unwrap_err(), a);

    // A lockfile in a subdirectory: by default its own directory is the root;
    // with the checkout's root given, `..` may climb up to it, not above.
    let sub = repo.join("services/api");
    std::fs::create_dir_all(&sub).unwrap();
    let text = "-r ../../reqs/base.txt\napi==1\n";
    let e = parse_repo(&sub, text, None).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    let p = parse_repo(&sub, text, Some(&repo)).unwrap();
    assert_exactly(&p, &[("api", "1"), ("base", "1")]);
    let e = parse_repo(&sub, "-r ../../../elsewhere/secret.txt\n", Some(&repo)).unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    // The lockfile itself must be under the root given.
    let e = parse_repo(&repo, "x==1\n", Some(&sub)).unwrap_err();
    assert_eq!((e.code, e.line), (ParseErrorCode::IncludeOutsideRoot, None));
    // Without includes nothing changes.
    assert_exactly(&parse_repo(&repo, "x==1\n", None).unwrap(), &[("x", "1")]);
}

/// An include that climbs out of the root's directory and comes straight
/// back in (`./../pip/other.txt` from a lockfile in `pip/`) names a file
/// inside the root: judged on the path resolved lexically against the
/// including file's directory, it is read. One that lands anywhere else
/// stays refused, with the same error as any include outside.
#[test]
fn requirements_includes_that_climb_out_and_back_in_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let pip = tmp.path().join("pip");
    let made = std::fs::create_dir_all(pip.join("sub"))
        .and_then(|()| std::fs::create_dir(tmp.path().join("pip2")))
        .and_then(|()| std::fs::write(pip.join("other.txt"), "other==1\n"))
        .and_then(|()| std::fs::write(pip.join("sub/deep.txt"), "-r ../../pip/other.txt\ndeep==1\n"))
        .and_then(|()| std::fs::write(tmp.path().join("pip2/other.txt"), "stolen==1\n"))
        .and_then(|()| std::fs::write(tmp.path().join("secret.txt"), "stolen==1\n"));
    made.unwrap();

    // From disk: up and back into the root, from the top-level file and from
    // an included file one level down.
    let p = parse_repo(&pip, "-r ./../pip/other.txt\nmain==1\n", None).unwrap();
    assert_exactly(&p, &[("main", "1"), ("other", "1")]);
    let p = parse_repo(&pip, "-r sub/deep.txt\n", None).unwrap();
    assert_exactly(&p, &[("deep", "1"), ("other", "1")]);
    // The same, with the root given above the lockfile's directory.
    let p = parse_repo(&pip.join("sub"), "-r ./../../pip/other.txt\n", Some(&pip)).unwrap();
    assert_exactly(&p, &[("other", "1")]);
    // Escaping: a sibling whose name starts like the root's, the directory
    // above, a detour through the root that ends outside it.
    let refused = parse_repo(&pip, "-r ./../pip2/other.txt\n", None).unwrap_err();
    assert_err(&refused, ParseErrorCode::IncludeOutsideRoot, Some(1));
    for written in
        ["../secret.txt", "./../pip/../secret.txt", "../pip/sub/../../secret.txt", "../../pip/other.txt"]
    {
        let e = parse_repo(&pip, &format!("ok==1\n-r {written}\n"), None).unwrap_err();
        assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(2));
        assert_eq!(e.message, refused.message, "{written}: one and the same refusal");
        assert!(!e.to_string().contains("secret") && !e.to_string().contains("pip2"), "{e}");
    }

    // osv-scanner's cyclic fixture: cyclic-r-complex-2.txt includes
    // `./../pip/cyclic-r-complex-1.txt` from a directory named `pip`.
    let peer = fixtures().join("requirements/peer-osv-scanner/pip");
    let bytes = std::fs::read(peer.join("cyclic-r-complex-1.txt")).unwrap();
    let p = parse_file(&peer.join("cyclic-r-complex-1.txt"), &bytes, None).unwrap();
    assert_exactly(&p, &[("cyclic-r-complex", "1"), ("cyclic-r-complex", "2"), ("cyclic-r-complex", "3")]);

    // Through the callback, the root is the top-level file's directory as
    // named: the include comes back into `pip/` and is asked for by its
    // resolved name; without a directory in the name it cannot come back.
    let list = [("other.txt", "other==1\n")];
    let mut asked = Vec::new();
    let p =
        parse_with("pip/requirements.txt", b"-r ./../pip/other.txt\n", Some(&mut files(&list, &mut asked)))
            .unwrap();
    assert_exactly(&p, &[("other", "1")]);
    assert_eq!(asked, ["other.txt"]);
    let mut asked = Vec::new();
    let e =
        parse_with("pip/requirements.txt", b"-r ./../pip2/other.txt\n", Some(&mut files(&list, &mut asked)))
            .unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    let e = parse_with("requirements.txt", b"-r ./../pip/other.txt\n", Some(&mut files(&list, &mut asked)))
        .unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    // Resolved, a name is checked again: this one is a drive (`C:x`).
    let e = parse_with("pip/requirements.txt", b"-r ../pip/C:x\n", Some(&mut files(&list, &mut asked)))
        .unwrap_err();
    assert_err(&e, ParseErrorCode::IncludeOutsideRoot, Some(1));
    assert!(asked.is_empty(), "{asked:?}");
}

// ---------------------------------------------------------------- poetry.lock

#[test]
fn poetry_lock_1_1_with_metadata_files() {
    // python3 -c 'import tomllib,sys; d=tomllib.load(open(sys.argv[1],"rb")); print(len({(p["name"],p["version"]) for p in d["package"]}))' F  => 83
    let p = parse_fixture("poetry/poetry-lock-1.1/poetry.lock");
    assert_eq!(p.format, Format::Poetry);
    assert_eq!(p.packages.len(), 83);
    assert_has(
        &p,
        &[
            ("attrs", "22.1.0"),
            ("backports-cached-property", "1.0.2"), // backports.cached-property
            ("cachecontrol", "0.12.11"),            // CacheControl
            ("colorama", "0.4.5"),
            ("flatdict", "4.0.1"),
            ("jeepney", "0.8.0"),
            ("ordered-set", "4.1.0"),
            ("pre-commit", "2.20.0"),
            ("pytest-cov", "3.0.0"),
            ("requests-toolbelt", "0.9.1"),
            ("virtualenv", "20.16.5"),
            ("zipp", "3.8.1"),
        ],
    );
    assert_no_name(&p, "CacheControl");
    assert_well_formed(&p);
}

#[test]
fn poetry_lock_2_0_keeps_git_packages() {
    // tomllib as above => 68 [[package]], one with source.type = "git" (poetry-core 2.0.0.dev0)
    let p = parse_fixture("poetry/poetry-1.8-lock-2.0/poetry.lock");
    assert_eq!(p.packages.len(), 68);
    assert_has(
        &p,
        &[
            ("poetry-core", "2.0.0.dev0"),
            ("backports-tarfile", "1.2.0"),
            ("coverage", "7.6.0"),
            ("filelock", "3.15.4"),
            ("jaraco-functools", "4.0.1"),
            ("packaging", "24.1"),
            ("pytest", "8.3.1"),
            ("requests", "2.32.3"),
            ("typing-extensions", "4.12.2"),
        ],
    );
}

#[test]
fn poetry_lock_2_1() {
    // tomllib => 78, poetry-core 2.4.1 from git
    let p = parse_fixture("poetry/poetry-2.x-lock-2.1/poetry.lock");
    assert_eq!(p.packages.len(), 78);
    assert_has(
        &p,
        &[
            ("poetry-core", "2.4.1"),
            ("anyio", "4.13.0"),
            ("colorama", "0.4.6"),
            ("fastjsonschema", "2.21.2"),
            ("iniconfig", "2.3.0"),
            ("msgpack", "1.1.2"),
            ("platformdirs", "4.9.6"),
            ("pytest-cov", "7.1.0"),
            ("requests", "2.33.1"),
        ],
    );
}

#[test]
fn poetry_directory_packages_are_left_out() {
    // tomllib => 72 [[package]], osv 0.1.2 with source.type = "directory" => 71
    let p = parse_fixture("poetry/osv-dev-worker-2.x/poetry.lock");
    assert_eq!(p.packages.len(), 71);
    assert_no_name(&p, "osv");
    assert_has(
        &p,
        &[
            ("absl-py", "2.5.0"),
            ("google-api-core", "2.34.0"),
            ("google-cloud-logging", "3.16.2"),
            ("grpcio-status", "1.83.0"),
            ("mccabe", "0.7.0"),
            ("platformdirs", "4.11.3"),
            ("pygit2", "1.19.1"),
            ("pyparsing", "3.3.2"),
            ("six", "1.17.0"),
        ],
    );
}

#[test]
fn poetry_peer_scalibr_fixtures() {
    let parse_peer = |f: &str| parse_as("poetry.lock", &format!("poetry/peer-scalibr/{f}"));
    assert_exactly(&parse_peer("one-package.lock").unwrap(), &[("numpy", "1.23.3")]);
    assert_exactly(&parse_peer("optional-package.lock").unwrap(), &[("numpy", "1.23.3")]);
    assert_exactly(&parse_peer("one-package-with-metadata.lock").unwrap(), &[("emoji", "2.0.0")]);
    assert_exactly(
        &parse_peer("two-packages.lock").unwrap(),
        &[("proto-plus", "1.22.0"), ("protobuf", "4.21.5")],
    );
    assert_exactly(&parse_peer("source-git.lock").unwrap(), &[("ike", "0.2.0")]);
    assert_exactly(&parse_peer("source-legacy.lock").unwrap(), &[("appdirs", "1.4.4")]);
    assert_exactly(
        &parse_peer("names-outside-package-block.lock").unwrap(),
        &[("first-pkg", "1.0.0"), ("second-pkg", "2.0.0")],
    );
    let p = parse_peer("multiple-packages.v2.lock").unwrap();
    assert_eq!(p.packages.len(), 11); // grep -c '^\[\[package\]\]' => 11 (proto-plus twice)
    assert_has(&p, &[("proto-plus", "1.22.0"), ("proto-plus", "1.23.0"), ("factory-boy", "3.3.1")]);
    // `package = []` with its [metadata]: a project without dependencies.
    assert!(parse_peer("empty.lock").unwrap().packages.is_empty());
    // An empty poetry.lock (zero bytes) has zero packages, as osv-scalibr reads it.
    assert!(parse_peer("empty-file.lock").unwrap().packages.is_empty());
    assert_eq!(parse_peer("not-toml.txt").unwrap_err().code, ParseErrorCode::FormatMismatch);
}

const POETRY_HEAD: &str = "[[package]]\nname = \"a\"\nversion = \"1.0\"\npython-versions = \"*\"\n\n";

#[test]
fn poetry_sources() {
    let text = format!(
        "{POETRY_HEAD}[[package]]\nname = \"local-dir\"\nversion = \"0.1.0\"\n[package.source]\ntype = \"directory\"\nurl = \"..\"\n\n\
         [[package]]\nname = \"local-file\"\nversion = \"0.2.0\"\n[package.source]\ntype = \"file\"\nurl = \"x.whl\"\n\n\
         [[package]]\nname = \"from-git\"\nversion = \"0.3.0\"\n[package.source]\ntype = \"git\"\nurl = \"https://x.invalid\"\n\n\
         [[package]]\nname = \"from-url\"\nversion = \"0.4.0\"\n[package.source]\ntype = \"url\"\nurl = \"https://x.invalid/a.whl\"\n\n\
         [[package]]\nname = \"Legacy_Index\"\nversion = \"0.5.0\"\n[package.source]\ntype = \"legacy\"\nurl = \"https://x.invalid\"\n\n\
         [[package]]\nname = \"odd\"\nversion = \"0.6.0\"\n[package.source]\ntype = \"new-kind\"\n\n\
         [metadata]\nlock-version = \"2.1\"\ncontent-hash = \"x\"\n"
    );
    let p = ok("poetry.lock", &text);
    assert_exactly(
        &p,
        &[
            ("a", "1.0"),
            ("from-git", "0.3.0"),
            ("from-url", "0.4.0"),
            ("legacy-index", "0.5.0"),
            ("odd", "0.6.0"),
        ],
    );
    assert_eq!(warnings(&p, "unknown_source"), [Some(41)]);
}

#[test]
fn poetry_errors() {
    // Unknown lock-version, at its line.
    let e = err(
        "poetry.lock",
        &format!("{POETRY_HEAD}[metadata]\nlock-version = \"3.0\"\ncontent-hash = \"x\"\n"),
    );
    assert_err(&e, ParseErrorCode::UnsupportedVersion, Some(7));
    for v in ["2", "1.1", "2.0", "2.1", "1.0"] {
        ok(
            "poetry.lock",
            &format!("{POETRY_HEAD}[metadata]\nlock-version = \"{v}\"\ncontent-hash = \"x\"\n"),
        );
    }
    let e = err(
        "poetry.lock",
        &format!("{POETRY_HEAD}[metadata]\nlock-version = \"2.x\"\ncontent-hash = \"x\"\n"),
    );
    assert_eq!(e.code, ParseErrorCode::UnsupportedVersion);
    // lock-version of the wrong type.
    let e = err("poetry.lock", &format!("{POETRY_HEAD}[metadata]\nlock-version = 2\ncontent-hash = \"x\"\n"));
    assert_err(&e, ParseErrorCode::Structure, Some(7));
    // A package without a version.
    let e = err("poetry.lock", "[[package]]\nname = \"a\"\npython-versions = \"*\"\n");
    assert_eq!(e.code, ParseErrorCode::Structure, "{e}");
    assert!(e.message.contains("version"), "{e}");
    // An empty version, a bad name.
    let e = err("poetry.lock", "[[package]]\nname = \"a\"\nversion = \"\"\npython-versions = \"*\"\n");
    assert_err(&e, ParseErrorCode::Structure, Some(1));
    let e = err("poetry.lock", &format!("{POETRY_HEAD}[[package]]\nname = \"a b\"\nversion = \"1\"\n"));
    assert_err(&e, ParseErrorCode::Structure, Some(6));
    // Truncated mid-string: a syntax error at that line.
    let full = String::from_utf8(read("poetry/poetry-2.x-lock-2.1/poetry.lock")).unwrap();
    let cut = full.find("description = \"").unwrap() + 20;
    let e = err("poetry.lock", &full[..cut]);
    assert_eq!(e.code, ParseErrorCode::Syntax, "{e}");
    assert_eq!(e.line, Some(full[..cut].lines().count()));
    // Malformed TOML.
    let e = err("poetry.lock", &format!("{POETRY_HEAD}[[package]\nname = \"b\"\n"));
    assert_err(&e, ParseErrorCode::Syntax, Some(6));
}

// ---------------------------------------------------------------- go.sum

#[test]
fn gosum_smokescreen() {
    // awk '$2 !~ /\/go\.mod$/ {print $1" "$2}' go.sum | sort -u | wc -l  => 42
    let p = parse_fixture("gosum/smokescreen/go.sum");
    assert_eq!(p.format, Format::GoSum);
    assert_eq!(p.packages.len(), 42);
    assert_has(
        &p,
        &[
            ("github.com/DataDog/datadog-go", "v4.5.1+incompatible"),
            ("github.com/patrickmn/go-cache", "v2.1.0+incompatible"),
            ("github.com/armon/go-proxyproto", "v0.0.0-20170620220930-48572f11356f"),
            ("github.com/hashicorp/go-cleanhttp", "v0.0.0-20171218145408-d5fe4b57a186"),
            // go.sum lists three versions of this module with content hashes.
            ("github.com/stripe/goproxy", "v0.0.0-20250909052350-d1a1594c59ae"),
            ("github.com/stripe/goproxy", "v0.0.0-20251009123132-ee3e713dae03"),
            ("github.com/stripe/goproxy", "v0.0.0-20260615103414-176e55e4af3b"),
        ],
    );
    // Only `/go.mod` lines: not in the build.
    assert_lacks(
        &p,
        &[
            ("github.com/google/martian", "v2.1.0+incompatible"),
            ("cloud.google.com/go", "v0.26.0"),
            ("rsc.io/sampler", "v1.3.0"),
        ],
    );
    assert!(p.packages.iter().all(|p| p.version.starts_with('v') && !p.version.contains("/go.mod")));
    assert_well_formed(&p);
}

#[test]
fn gosum_osv_scanner_and_osv_dev() {
    // same awk => 273 and 137
    let p = parse_fixture("gosum/osv-scanner/go.sum");
    assert_eq!(p.packages.len(), 273);
    assert!(p.packages.iter().filter(|p| p.version.ends_with("+incompatible")).count() >= 2);
    let p = parse_fixture("gosum/osv-dev-go/go.sum");
    assert_eq!(p.packages.len(), 137);
}

/// Every module version a go.mod requires is in its go.sum's packages (but
/// modules replaced by a local directory, which go.sum does not list).
#[test]
fn gosum_covers_every_gomod_requirement() {
    for dir in ["gosum/smokescreen", "gosum/osv-scanner", "gosum/osv-dev-go"] {
        let gomod = String::from_utf8(read(&format!("{dir}/go.mod"))).unwrap();
        let local: BTreeSet<&str> = gomod
            .lines()
            .filter_map(|l| l.trim().strip_prefix("replace "))
            .filter(|l| l.contains("=> ."))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut required = Vec::new();
        let mut in_block = false;
        for line in gomod.lines() {
            let line = line.trim();
            if line == "require (" {
                in_block = true;
            } else if in_block && line == ")" {
                in_block = false;
            } else if let Some(one) = line.strip_prefix("require ").filter(|_| !in_block) {
                required.push(one.to_owned());
            } else if in_block && !line.is_empty() {
                required.push(line.to_owned());
            }
        }
        let p = parse_fixture(&format!("{dir}/go.sum"));
        let got = pairs(&p);
        let mut checked = 0;
        for r in &required {
            let mut f = r.split_whitespace();
            let (Some(m), Some(v)) = (f.next(), f.next()) else { continue };
            if local.contains(m) {
                assert!(!got.iter().any(|(n, _)| n == m), "{m} is local");
                continue;
            }
            assert!(got.contains(&(m.to_owned(), v.to_owned())), "{dir}: {m} {v}");
            checked += 1;
        }
        assert!(checked > 25, "{dir}: {checked}");
    }
}

#[test]
fn gosum_rules() {
    let h = "h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=";
    let text = format!(
        "example.com/a v1.0.0 {h}\nexample.com/a v1.0.0/go.mod {h}\nexample.com/b v1.1.0/go.mod {h}\n\
         example.com/c v2.0.0+incompatible {h}\r\nexample.com/d v0.0.0-20200101000000-abcdef123456 {h}\n\n\
         example.com/e/v3 v3.1.0-rc.1 {h}\n"
    );
    let p = ok("go.sum", &text);
    assert_exactly(
        &p,
        &[
            ("example.com/a", "v1.0.0"),
            ("example.com/c", "v2.0.0+incompatible"),
            ("example.com/d", "v0.0.0-20200101000000-abcdef123456"),
            ("example.com/e/v3", "v3.1.0-rc.1"),
        ],
    );
    // Only /go.mod lines: a valid go.sum with nothing in the build.
    assert!(ok("go.sum", &format!("example.com/b v1.1.0/go.mod {h}\n")).packages.is_empty());
    // An empty go.sum: a module without dependencies.
    assert!(ok("go.sum", "").packages.is_empty());
    assert!(ok("go.sum", "\n  \n").packages.is_empty());
}

#[test]
fn gosum_malformed_lines_are_errors_with_their_line() {
    let h = "h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=";
    let good = format!("example.com/a v1.0.0 {h}\n");
    for (bad, why) in [
        ("example.com/b v1.0.0".to_owned(), "two fields"),
        (format!("example.com/b v1.0.0 {h} extra"), "four fields"),
        (format!("example.com/b 1.0.0 {h}"), "no v"),
        ("example.com/b v1.0.0 h1:J7Y8YcW2".to_owned(), "truncated hash"),
        (format!("example.com/b v1.0.0 sha256:{h}"), "unknown hash"),
        (format!("example.com/b v1.0.0/go.sum {h}"), "bad suffix"),
        (format!("exa mple.com/b v1.0.0 {h}"), "space in path"),
        (format!("<<<<<<< HEAD {h} x"), "conflict"),
        ("=======".to_owned(), "conflict"),
        (format!("example.com/b v {h}"), "empty version"),
    ] {
        let e = err("go.sum", &format!("{good}{good}{bad}\n{good}"));
        assert_err(&e, ParseErrorCode::Syntax, Some(3));
        assert!(!e.message.contains("example.com"), "{why}: {e}");
    }
    // A text file named go.sum is not one.
    assert_eq!(err("go.sum", "hello world\nthis is text\n").code, ParseErrorCode::FormatMismatch);
    assert_eq!(
        parse_as("go.sum", "gosum/peer-scalibr/indirect-1.23.sum").unwrap_err().code,
        ParseErrorCode::FormatMismatch
    );
    // The peer go.sum: go.mod-only versions left out.
    let p = parse_as("go.sum", "gosum/peer-scalibr/indirect-1.16.sum").unwrap();
    assert_exactly(
        &p,
        &[
            ("github.com/davecgh/go-spew", "v1.1.1"),
            ("github.com/pmezard/go-difflib", "v1.0.0"),
            ("github.com/sirupsen/logrus", "v1.9.3"),
            ("github.com/stretchr/testify", "v1.7.0"),
            ("golang.org/x/sys", "v0.0.0-20220715151400-c0bba94af5f8"),
            ("gopkg.in/yaml.v3", "v3.0.0-20200313102051-9f266ea9e77c"),
        ],
    );
}

// ---------------------------------------------------------------- Cargo.lock

#[test]
fn cargo_v1_metadata_and_git() {
    // python3 -c 'import tomllib,re,sys; d=tomllib.load(open(sys.argv[1],"rb"));
    //   print(len({(p["name"],p["version"]) for p in d["package"] if re.match(r"(registry|sparse|git)\+", p.get("source",""))}))' F
    //   => 242 (243 [[package]], one workspace member)
    let p = parse_fixture("cargo/rustsec-v1-metadata/Cargo.lock");
    assert_eq!(p.format, Format::CargoLock);
    assert_eq!(p.packages.len(), 242);
    assert_has(&p, &[("cargo-edit", "0.4.2"), ("rustsec", "0.16.0")]); // git+ sources
    assert_lacks(&p, &[("cargo-audit", "0.10.0")]);
    assert_well_formed(&p);
}

#[test]
fn cargo_v2_and_v3() {
    // same tomllib command => 244 (v2) and 383 (v3)
    let p = parse_fixture("cargo/rustsec-v2/Cargo.lock");
    assert_eq!(p.packages.len(), 244);
    assert_no_name(&p, "cargo-audit");
    let p = parse_fixture("cargo/rustsec-v3/Cargo.lock");
    assert_eq!(p.packages.len(), 383);
    // Workspace members (no source).
    assert_lacks(
        &p,
        &[
            ("cargo-audit", "0.21.1"),
            ("cargo-lock", "10.1.0"),
            ("cvss", "2.0.0"),
            ("platforms", "3.5.0"),
            ("rustsec", "0.30.2"),
        ],
    );
}

#[test]
fn cargo_v4_workspaces_and_git() {
    // same tomllib command => 374 (459 [[package]], 85 workspace members)
    let p = parse_fixture("cargo/linkerd2-proxy-v4/Cargo.lock");
    assert_eq!(p.packages.len(), 374);
    assert_has(&p, &[("kubert-prometheus-process", "0.2.4"), ("kubert-prometheus-tokio", "0.2.1")]);
    assert_lacks(&p, &[("linkerd-app", "0.1.0"), ("linkerd-addr", "0.1.0"), ("hyper-balance", "0.1.0")]);
    assert!(p.warnings.is_empty());
    // same => 284; rustls 0.23.43 from crates.io, the workspace's rustls 0.24.0-dev.1 left out
    let p = parse_fixture("cargo/rustls-v4/Cargo.lock");
    assert_eq!(p.packages.len(), 284);
    assert_has(&p, &[("rustls", "0.23.43")]);
    assert_lacks(&p, &[("rustls", "0.24.0-dev.1"), ("bogo", "0.1.0")]);
    assert_well_formed(&p);
}

#[test]
fn cargo_peer_scalibr_fixtures() {
    let parse_peer = |f: &str| parse_as("Cargo.lock", &format!("cargo/peer-scalibr/{f}"));
    assert_exactly(&parse_peer("one-package.lock").unwrap(), &[("addr2line", "0.15.2")]);
    assert_exactly(&parse_peer("two-packages.lock").unwrap(), &[("addr2line", "0.15.2"), ("syn", "1.0.73")]);
    assert_exactly(&parse_peer("two-packages-with-local.lock").unwrap(), &[("addr2line", "0.15.2")]);
    assert_exactly(&parse_peer("duplicate.lock").unwrap(), &[("syn", "1.0.73"), ("syn", "2.0.0")]);
    assert_exactly(
        &parse_peer("package-with-comments.lock").unwrap(),
        &[("addr2line", "0.15.2"), ("syn", "1.0.73")],
    );
    assert_exactly(
        &parse_peer("package-with-build-string.lock").unwrap(),
        &[("wasi", "0.10.2+wasi-snapshot-preview1")],
    );
    assert_eq!(parse_peer("many-packages.lock").unwrap().packages.len(), 6);
    // `version = 3` alone: no dependencies.
    assert!(parse_peer("empty.lock").unwrap().packages.is_empty());
    assert_eq!(parse_peer("not-toml.txt").unwrap_err().code, ParseErrorCode::FormatMismatch);
}

const CARGO_HEAD: &str =
    "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\n";

fn cargo_pkg(name: &str, version: &str, source: Option<&str>) -> String {
    let source = source.map(|s| format!("source = \"{s}\"\n")).unwrap_or_default();
    format!("\n[[package]]\nname = \"{name}\"\nversion = \"{version}\"\n{source}")
}

#[test]
fn cargo_sources() {
    let crates_io = "registry+https://github.com/rust-lang/crates.io-index";
    let text = [
        format!("{CARGO_HEAD}version = 4\n"),
        cargo_pkg("member", "0.1.0", None),
        cargo_pkg("serde", "1.0.0", Some(crates_io)),
        cargo_pkg("sparse-one", "1.0.0", Some("sparse+https://index.crates.io/")),
        cargo_pkg("forked", "2.0.0", Some("git+https://example.invalid/forked?rev=abc#abcdef")),
        cargo_pkg("private", "0.3.0", Some("registry+https://user:secret@my-registry.invalid/index")),
        cargo_pkg("private-two", "0.4.0", Some("registry+https://user:secret@my-registry.invalid/index")),
        cargo_pkg("sparse-private", "0.5.0", Some("sparse+https://cargo.other.invalid/api/")),
        cargo_pkg("local", "0.6.0", Some("path+file:///src/local")),
        cargo_pkg("vendored", "0.7.0", Some("directory+file:///vendor")),
    ]
    .concat();
    let p = ok("Cargo.lock", &text);
    assert_exactly(
        &p,
        &[
            ("serde", "1.0.0"),
            ("sparse-one", "1.0.0"),
            ("forked", "2.0.0"),
            ("private", "0.3.0"),
            ("private-two", "0.4.0"),
            ("sparse-private", "0.5.0"),
            ("vendored", "0.7.0"),
        ],
    );
    // One warning per other registry, naming its host but never its credentials.
    assert_eq!(warnings(&p, "other_registry").len(), 2);
    assert_eq!(warnings(&p, "unknown_source").len(), 1);
    assert!(p.warnings.iter().all(|w| !w.message.contains("secret")), "{:?}", p.warnings);
    assert!(p.warnings.iter().any(|w| w.message.contains("my-registry.invalid")));
}

#[test]
fn cargo_versions() {
    let pkg = cargo_pkg("a", "1.0.0", Some("registry+https://github.com/rust-lang/crates.io-index"));
    for v in ["", "version = 3\n", "version = 4\n"] {
        assert_eq!(ok("Cargo.lock", &format!("{CARGO_HEAD}{v}{pkg}")).packages.len(), 1, "{v:?}");
    }
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 99\n{pkg}"));
    assert_err(&e, ParseErrorCode::UnsupportedVersion, Some(3));
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 5\n{pkg}"));
    assert_eq!(e.code, ParseErrorCode::UnsupportedVersion);
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = \"3\"\n{pkg}"));
    assert_err(&e, ParseErrorCode::Structure, Some(3));
}

#[test]
fn cargo_errors() {
    // A package without a version: structure, with the field named.
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 3\n\n[[package]]\nname = \"a\"\n"));
    assert_eq!(e.code, ParseErrorCode::Structure);
    assert_eq!(e.message, "missing field `version`");
    assert!(e.line.is_some());
    // A version of the wrong type, at its line.
    let e =
        err("Cargo.lock", &format!("{CARGO_HEAD}version = 3\n\n[[package]]\nname = \"a\"\nversion = 1\n"));
    assert_err(&e, ParseErrorCode::Structure, Some(7));
    // Not a version, not a name.
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 3\n{}", cargo_pkg("a", "latest", None)));
    assert_err(&e, ParseErrorCode::Structure, Some(5));
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 3\n{}", cargo_pkg("a/b", "1.0.0", None)));
    assert_err(&e, ParseErrorCode::Structure, Some(5));
    // `package` that is not an array of tables.
    let e = err("Cargo.lock", &format!("{CARGO_HEAD}version = 3\npackage = 1\n\n[[x]]\n"));
    assert_eq!(e.code, ParseErrorCode::Structure);
    // Truncated inside a string.
    let full = String::from_utf8(read("cargo/rustsec-v3/Cargo.lock")).unwrap();
    let cut = full.find("source = \"registry+").unwrap() + 15;
    let e = err("Cargo.lock", &full[..cut]);
    assert_err(&e, ParseErrorCode::Syntax, Some(full[..cut].lines().count()));
    // JSON, YAML, a poetry.lock: not a Cargo.lock.
    assert_eq!(err("Cargo.lock", "{\"package\": []}").code, ParseErrorCode::FormatMismatch);
    assert_eq!(err("Cargo.lock", "{\"lockfileVersion\": 3}").code, ParseErrorCode::FormatMismatch);
    let poetry = String::from_utf8(read("poetry/poetry-lock-1.1/poetry.lock")).unwrap();
    assert_eq!(err("Cargo.lock", &poetry).code, ParseErrorCode::FormatMismatch);
    // Empty (blank, or comments only such as the header alone): zero packages.
    assert!(ok("Cargo.lock", "").packages.is_empty());
    assert!(ok("Cargo.lock", CARGO_HEAD).packages.is_empty());
    // The header and a `[metadata]` table only: not a lockfile Cargo writes.
    assert_eq!(err("Cargo.lock", &format!("{CARGO_HEAD}[metadata]\n")).code, ParseErrorCode::Structure);
}

// ---------------------------------------------------------------- Gemfile.lock

#[test]
fn gemfile_huginn_2026() {
    // python3: specs at 4 spaces in GEM/GIT sections, `name (version[-platform])`, unique (name, version) => 280
    let p = parse_fixture("gemfile/huginn-2026/Gemfile.lock");
    assert_eq!(p.format, Format::GemfileLock);
    assert_eq!(p.packages.len(), 280);
    assert_has(
        &p,
        &[
            ("erector", "0.10.0"),    // GIT
            ("mini_racer", "0.20.0"), // GIT
            ("ffi", "1.17.4"),        // only as ffi (1.17.4-<platform>)
            ("libv8-node", "24.12.0.1"),
            ("google-protobuf", "4.35.1"),
            ("Ascii85", "2.0.1"),
            ("ace-rails-ap", "4.5"),
            ("action_text-trix", "2.1.19"),
            ("actioncable", "8.1.3.1"),
        ],
    );
    assert_lacks(&p, &[("dotenv", "3.2.0")]); // PATH
    assert!(p.packages.iter().all(|p| !p.version.contains('-')), "platform suffixes are not versions");
    // Dependencies at six spaces are not packages: treetop appears in GEM with its own version only.
    assert_eq!(p.packages.iter().filter(|p| p.name == "treetop").count(), 1);
    assert_well_formed(&p);
}

#[test]
fn gemfile_huginn_2016_git_and_path() {
    // same python => 225; PATH holds dotenv 2.0.1 and dotenv-rails 2.0.1
    let p = parse_fixture("gemfile/huginn-2016/Gemfile.lock");
    assert_eq!(p.packages.len(), 225);
    assert_has(
        &p,
        &[
            ("twitter-stream", "0.1.15"),
            ("weibo_2", "0.1.7"),
            ("delayed_job_active_record", "4.1.0"),
            ("faraday_middleware", "0.10.0"),
            ("tumblr_client", "0.8.5"),
            ("omniauth-wunderlist", "0.0.1"),
            ("actionmailer", "4.2.7.1"),
        ],
    );
    assert_no_name(&p, "dotenv");
    assert_no_name(&p, "dotenv-rails");
}

#[test]
fn gemfile_rubygems_org_two_gem_sections_and_platforms() {
    // same python => 298
    let p = parse_fixture("gemfile/rubygems-org/Gemfile.lock");
    assert_eq!(p.packages.len(), 298);
    assert_has(
        &p,
        &[
            ("avo-advanced", "3.32.4"), // first GEM section (another gem server)
            ("avo-pro", "3.32.4"),
            ("actioncable", "8.1.3.1"), // second GEM section
            ("nokogiri", "1.19.4"),
            ("pg", "1.6.3"),
            ("ffi", "1.17.4"),
            ("rails", "8.1.3.1"),
            ("dotenv", "3.2.0"), // from GEM here
        ],
    );
    assert_eq!(p.packages.iter().filter(|p| p.name == "nokogiri").count(), 1);
    assert_eq!(p.packages.iter().filter(|p| p.name == "ffi").count(), 1);
}

#[test]
fn gemfile_peer_scalibr_fixtures() {
    let parse_peer = |f: &str| parse_as("Gemfile.lock", &format!("gemfile/peer-scalibr/{f}"));
    assert_exactly(&parse_peer("one-gem.lock").unwrap(), &[("ast", "2.4.2")]);
    assert_exactly(&parse_peer("source-section-at-end.lock").unwrap(), &[("ast", "2.4.2")]);
    assert_exactly(
        &parse_peer("some-gems.lock").unwrap(),
        &[("coderay", "1.1.3"), ("method_source", "1.0.0"), ("pry", "0.14.1")],
    );
    assert_exactly(
        &parse_peer("has-git-gem.lock").unwrap(),
        &[
            ("hanami-controller", "2.0.0.alpha1"),
            ("hanami-utils", "2.0.0.alpha1"),
            ("concurrent-ruby", "1.1.7"),
            ("rack", "2.2.3"),
            ("transproc", "1.1.1"),
        ],
    );
    let p = parse_peer("has-local-gem.lock").unwrap();
    assert_eq!(p.packages.len(), 29); // 30 specs in GEM at 4 spaces; backbone-on-rails is PATH
    assert_no_name(&p, "backbone-on-rails");
    assert_has(&p, &[("nokogiri", "1.13.3"), ("eco-source", "1.1.0.rc.1")]);
    assert_eq!(parse_peer("rails.lock").unwrap().packages.len(), 46);
    assert_eq!(parse_peer("rubocop.lock").unwrap().packages.len(), 10);
    assert_eq!(parse_peer("multiple-gems.lock").unwrap().packages.len(), 6);
    for f in ["no-gems.lock", "no-gem-section.lock", "no-spec-section.lock"] {
        assert!(parse_peer(f).unwrap().packages.is_empty(), "{f}");
    }
    // `    invalid-name` without a version.
    assert_err(&parse_peer("invalid.lock").unwrap_err(), ParseErrorCode::Syntax, Some(4));
}

#[test]
fn gemfile_rules() {
    let text = "GIT\n  remote: https://example.invalid/g.git\n  revision: abc\n  specs:\n    from-git (1.0.0)\n\
                \x20     dep (>= 1)\n\nPATH\n  remote: .\n  specs:\n    myapp (0.1.0)\n      rails\n\n\
                PLUGIN SOURCE\n  remote: s3://bucket\n  type: s3\n  specs:\n    plugged (2.0.0)\n\n\
                GEM\n  remote: https://rubygems.invalid/\n  specs:\n    nokogiri (1.13.10-x86_64-linux)\n\
                \x20     racc (~> 1.4)\n    nokogiri (1.13.10-arm64-darwin)\n    nokogiri (1.13.10-java)\n\
                \x20   nokogiri (1.13.10-x64-mingw32)\n    nokogiri (1.13.10-x86_64-linux-musl)\n\
                \x20   rails (7.1.0.beta1)\n    racc (1.6.0)\n\nPLATFORMS\n  ruby\n  x86_64-linux\n\n\
                DEPENDENCIES\n  from-git!\n  myapp!\n  nokogiri\n\nCHECKSUMS\n  racc (1.6.0) sha256=abc\n\n\
                RUBY VERSION\n   ruby 3.3.0p0\n\nBUNDLED WITH\n   2.5.3\n";
    let p = ok("Gemfile.lock", text);
    assert_exactly(
        &p,
        &[
            ("from-git", "1.0.0"),
            ("plugged", "2.0.0"),
            ("nokogiri", "1.13.10"),
            ("rails", "7.1.0.beta1"),
            ("racc", "1.6.0"),
        ],
    );
    // CRLF.
    let p = ok("Gemfile.lock", &text.replace('\n', "\r\n"));
    assert_eq!(p.packages.len(), 5);
    // A section Bundler does not know is skipped.
    let p = ok(
        "Gemfile.lock",
        "GEM\n  specs:\n    a (1.0)\n\nFUTURE THING\n    whatever (x)\n\nDEPENDENCIES\n  a\n",
    );
    assert_exactly(&p, &[("a", "1.0")]);
}

#[test]
fn gemfile_errors() {
    let base = "GEM\n  remote: https://rubygems.invalid/\n  specs:\n    ok (1.0)\n";
    let footer = "\nPLATFORMS\n  ruby\n\nDEPENDENCIES\n  ok\n";
    for (spec, why) in [
        ("    bad", "no version"),
        ("    bad (1.0", "truncated"),
        ("    bad ()", "empty version"),
        ("    bad (1.0-)", "empty platform"),
        ("    bad (v1.0)", "not a version"),
        ("    bad (1.0) extra", "trailing text"),
        ("     bad (1.0)", "five spaces"),
        ("    \tbad (1.0)", "tab"),
    ] {
        let e = err("Gemfile.lock", &format!("{base}{spec}\n{footer}"));
        assert_err(&e, ParseErrorCode::Syntax, Some(5));
        assert!(!e.message.contains("bad"), "{why}: {e}");
    }
    // Merge conflict markers.
    let e = err(
        "Gemfile.lock",
        &format!("{base}<<<<<<< HEAD\n    x (1.0)\n=======\n    x (2.0)\n>>>>>>> b\n{footer}"),
    );
    assert_err(&e, ParseErrorCode::Syntax, Some(5));
    // Truncated mid-spec.
    let full = String::from_utf8(read("gemfile/rubygems-org/Gemfile.lock")).unwrap();
    let cut = full.find("    nokogiri (1.19.4)").unwrap() + 18;
    assert_err(&err("Gemfile.lock", &full[..cut]), ParseErrorCode::Syntax, Some(full[..cut].lines().count()));
    // Not a Gemfile.lock.
    assert_eq!(err("Gemfile.lock", "just some text\n").code, ParseErrorCode::FormatMismatch);
    assert!(ok("Gemfile.lock", "\r\n").packages.is_empty()); // empty: zero packages
    assert_eq!(err("Gemfile.lock", "lockfileVersion: '9.0'\n").code, ParseErrorCode::FormatMismatch);
}

// ---------------------------------------------------------------- all formats

#[test]
fn invalid_utf8_is_reported_with_its_line() {
    for name in ["requirements.txt", "poetry.lock", "go.sum", "Cargo.lock", "Gemfile.lock"] {
        let e = parse(name, b"line one\nline two \xff\xfe\n").unwrap_err();
        assert_err(&e, ParseErrorCode::InvalidUtf8, Some(2));
        assert_eq!(e.file, name);
    }
}

#[test]
fn wrong_content_for_the_name_is_a_mismatch() {
    let gosum = read("gosum/smokescreen/go.sum");
    let cargo = read("cargo/rustsec-v2/Cargo.lock");
    let gemfile = read("gemfile/huginn-2016/Gemfile.lock");
    let poetry = read("poetry/poetry-lock-1.1/poetry.lock");
    for (name, bytes) in [
        ("Cargo.lock", &gosum),
        ("go.sum", &cargo),
        ("go.sum", &gemfile),
        ("Gemfile.lock", &poetry),
        ("poetry.lock", &cargo),
        ("requirements.txt", &cargo),
        ("requirements.txt", &gosum),
    ] {
        let e = parse(name, bytes).unwrap_err();
        assert_eq!(e.code, ParseErrorCode::FormatMismatch, "{name}: {e}");
    }
}

#[test]
fn detection_by_content_alone() {
    let cases = [
        ("gosum/smokescreen/go.sum", Format::GoSum),
        ("cargo/rustsec-v1-metadata/Cargo.lock", Format::CargoLock),
        ("poetry/poetry-lock-1.1/poetry.lock", Format::Poetry),
        ("gemfile/huginn-2016/Gemfile.lock", Format::GemfileLock),
    ];
    for (rel, format) in cases {
        assert_eq!(parse("upload.bin", &read(rel)).unwrap().format, format, "{rel}");
    }
    // Names with directories, and requirements files by their name.
    assert_eq!(
        parse("a/b/Cargo.lock", &read("cargo/rustsec-v2/Cargo.lock")).unwrap().format,
        Format::CargoLock
    );
    assert_eq!(ok("requirements-dev.txt", "a==1\n").format, Format::Requirements);
}

#[test]
fn errors_never_echo_file_content() {
    let secret = "hunter2-do-not-echo";
    let cases = [
        ("requirements.txt", format!("{secret} {secret}\n")),
        (
            "go.sum",
            format!("example.com/a v1.0.0 h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=\n{secret}\n"),
        ),
        (
            "Cargo.lock",
            format!("{CARGO_HEAD}version = 3\n[[package]]\nname = \"{secret}\"\nversion = {secret}\n"),
        ),
        ("poetry.lock", format!("{POETRY_HEAD}[[package]]\nname = \"{secret}\"\nversion = 1\n")),
        ("Gemfile.lock", format!("GEM\n  specs:\n    {secret}\n\nDEPENDENCIES\n")),
    ];
    for (name, text) in cases {
        let e = err(name, &text);
        assert!(!e.to_string().contains(secret), "{e}");
    }
}

#[test]
fn parsed_serializes_as_the_contract_says() {
    let p = ok("requirements.txt", "Zope.Interface==5.4.0\nflask\n");
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["format"], "requirements");
    assert_eq!(
        v["packages"],
        serde_json::json!([{"ecosystem": "PyPI", "name": "zope-interface", "version": "5.4.0"}])
    );
    assert_eq!(v["warnings"][0]["code"], "unpinned");
    assert_eq!(v["warnings"][0]["line"], 2);
    let p = ok("go.sum", "example.com/a v1.0.0 h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=\n");
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["format"], "go-sum");
    assert_eq!(v["packages"][0]["ecosystem"], "Go");
    assert_eq!(v["packages"][0]["version"], "v1.0.0");
    assert!(v.get("warnings").is_none());
    assert_eq!(p.packages[0].ecosystem, Ecosystem::Go);
}

// ---------------------------------------------------------------- properties

const NAMES: [&str; 7] =
    ["requirements.txt", "poetry.lock", "go.sum", "Cargo.lock", "Gemfile.lock", "go.mod", "upload.bin"];

/// Small valid files of each format, to mutate.
fn seeds() -> Vec<(&'static str, String)> {
    vec![
        (
            "requirements.txt",
            "# c\nfoo[x]==1.0 ; python_version < \"3.8\" \\\n  --hash=sha256:ab\n-r other.txt\nbar>=2\n-e .\n".to_owned(),
        ),
        (
            "poetry.lock",
            format!("{POETRY_HEAD}[package.source]\ntype = \"git\"\n\n[metadata]\nlock-version = \"2.1\"\ncontent-hash = \"x\"\n"),
        ),
        (
            "go.sum",
            "example.com/a v1.0.0 h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=\n\
             example.com/a v1.0.0/go.mod h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=\n"
                .to_owned(),
        ),
        (
            "Cargo.lock",
            format!(
                "{CARGO_HEAD}version = 4\n{}{}",
                cargo_pkg("a", "1.0.0", Some("registry+https://github.com/rust-lang/crates.io-index")),
                cargo_pkg("b", "0.1.0", None)
            ),
        ),
        (
            "Gemfile.lock",
            "GEM\n  remote: https://rubygems.invalid/\n  specs:\n    ffi (1.17.4-x86_64-linux)\n      x (>= 1)\n\
             \nPATH\n  remote: .\n  specs:\n    app (0.1.0)\n\nPLATFORMS\n  ruby\n\nDEPENDENCIES\n  ffi\n"
                .to_owned(),
        ),
    ]
}

/// Parses with an includes callback that answers from `included`; checks the
/// invariants of any successful result, and that a failure names the file,
/// a line inside it (or the include's), and a code this input can cause.
fn parse_any(name: &str, bytes: &[u8], included: &str) {
    let mut read = |_: &str| -> Result<String, String> { Ok(included.to_owned()) };
    match parse_with(name, bytes, Some(&mut read)) {
        Ok(p) => assert_well_formed(&p),
        Err(e) => {
            use ParseErrorCode as C;
            let lines = bytes.iter().chain(included.as_bytes()).filter(|&&b| b == b'\n').count() + 1;
            assert!(e.line.is_none_or(|l| (1..=lines).contains(&l)), "{e}");
            let allowed = match name {
                "requirements.txt" => {
                    matches!(e.code, C::InvalidUtf8 | C::Syntax | C::IncludeFailed | C::IncludeOutsideRoot)
                }
                "upload.bin" => e.code != C::FormatMismatch && e.code != C::TooLarge,
                _ => matches!(
                    e.code,
                    C::FormatMismatch | C::InvalidUtf8 | C::Syntax | C::Structure | C::UnsupportedVersion
                ),
            };
            assert!(allowed, "{name}: {e}");
        }
    }
}

/// Generated (name, version) sets, written as each tool writes them.
fn generated() -> impl Strategy<Value = BTreeSet<(String, String)>> {
    let name = "[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4})?";
    let version = "(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})";
    proptest::collection::btree_map(name, version, 1..8).prop_map(|m| m.into_iter().collect())
}

fn render(which: usize, packages: &BTreeSet<(String, String)>) -> (&'static str, String) {
    const H1: &str = "h1:J7Y8YcW2NihsgmVo/mv3lAwl/skON4iLHjSsI+c5H38=";
    let mut out = String::new();
    let each = |f: &dyn Fn(&str, &str) -> String| packages.iter().map(|(n, v)| f(n, v)).collect::<String>();
    match which {
        0 => ("requirements.txt", each(&|n, v| format!("{n}=={v} \\\n    --hash=sha256:ab\n"))),
        1 => {
            out.push_str(&each(&|n, v| {
                format!("[[package]]\nname = \"{n}\"\nversion = \"{v}\"\npython-versions = \"*\"\n\n")
            }));
            out.push_str("[metadata]\nlock-version = \"2.1\"\ncontent-hash = \"x\"\n");
            ("poetry.lock", out)
        }
        2 => {
            out.push_str(CARGO_HEAD);
            out.push_str("version = 4\n");
            out.push_str(&each(&|n, v| {
                cargo_pkg(n, v, Some("registry+https://github.com/rust-lang/crates.io-index"))
            }));
            ("Cargo.lock", out)
        }
        3 => {
            out.push_str("GEM\n  remote: https://rubygems.invalid/\n  specs:\n");
            out.push_str(&each(&|n, v| format!("    {n} ({v})\n      dep (>= 1)\n")));
            out.push_str("\nPLATFORMS\n  ruby\n\nDEPENDENCIES\n  x\n");
            ("Gemfile.lock", out)
        }
        4 => {
            ("go.sum", each(&|n, v| format!("example.com/{n} v{v} {H1}\nexample.com/{n} v{v}/go.mod {H1}\n")))
        }
        _ => {
            out.push_str("module example.com/m\n\ngo 1.22\n\nrequire (\n");
            out.push_str(&each(&|n, v| format!("\texample.com/{n} v{v} // indirect\n")));
            out.push_str(")\n");
            ("go.mod", out)
        }
    }
}

/// What `render` should read back as: Go modules under their path and `v`.
fn read_back(which: usize, packages: &BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    match which {
        4 | 5 => packages.iter().map(|(n, v)| (format!("example.com/{n}"), format!("v{v}"))).collect(),
        _ => packages.clone(),
    }
}

/// Whether a name the includes callback is asked for stays inside the
/// lockfile's directory: relative, no drive, no URL, and never `..` above it.
fn stays_inside(name: &str) -> bool {
    let url = name.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    if name.starts_with(['/', '\\']) || name.as_bytes().get(1) == Some(&b':') || url {
        return false;
    }
    let mut stack: Vec<&str> = Vec::new();
    for part in name.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." if stack.pop().is_none() => return false,
            ".." => {}
            p => stack.push(p),
        }
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Includes of arbitrary names, nested: the callback is only ever asked
    /// for names inside the lockfile's tree, and every other one is refused.
    /// With the top-level file in a directory named `a`, names that climb
    /// out and come back in through `a` are asked for by their resolved name.
    #[test]
    fn includes_never_reach_outside(
        names in proptest::collection::vec("[a./\\\\:]{1,10}", 1..5),
        file in prop::sample::select(vec!["requirements.txt", "a/requirements.txt", "a/a/requirements.txt"]),
    ) {
        let line = |n: &str| format!("-r '{n}'\n");
        let top: String = names.iter().map(|n| line(n)).collect();
        let mut asked = Vec::new();
        let mut read = |name: &str| -> Result<String, String> {
            asked.push(name.to_owned());
            // Every included file includes the next name, so names join up.
            Ok(names.iter().skip(asked.len() % names.len()).take(1).map(|n| line(n)).collect())
        };
        let result = parse_with(file, top.as_bytes(), Some(&mut read));
        for name in &asked {
            prop_assert!(stays_inside(name), "asked for {name:?}");
        }
        if let Err(e) = result {
            prop_assert!(e.code != ParseErrorCode::IncludeOutsideRoot || e.message.contains("include root"));
        }
    }

    /// Generated lockfiles of every format read back exactly, with or
    /// without a byte order mark and CRLF line ends.
    #[test]
    fn generated_lockfiles_read_back_exactly(
        packages in generated(), which in 0..6usize, crlf in any::<bool>(), bom in any::<bool>(),
    ) {
        let (name, mut text) = render(which, &packages);
        if crlf {
            text = text.replace('\n', "\r\n");
        }
        if bom {
            text.insert(0, '\u{feff}');
        }
        let p = parse(name, text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        assert_well_formed(&p);
        prop_assert_eq!(pairs(&p), read_back(which, &packages));
        prop_assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    /// A generated lockfile cut anywhere never lists a package it was not
    /// generated with (a cut version is an error or a shorter, visible one).
    #[test]
    fn truncated_generated_lockfiles_never_invent_names(
        packages in generated(), which in 0..6usize, cut in any::<prop::sample::Index>(),
    ) {
        let (name, text) = render(which, &packages);
        let bytes = &text.as_bytes()[..cut.index(text.len() + 1)];
        parse_any(name, bytes, "");
        if let Ok(p) = parse(name, bytes) {
            let names: BTreeSet<String> = read_back(which, &packages).into_iter().map(|(n, _)| n).collect();
            for pkg in &p.packages {
                prop_assert!(names.contains(&pkg.name), "{pkg:?} from a cut {name}");
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), which in 0..NAMES.len()) {
        parse_any(NAMES[which], &bytes, "");
    }

    #[test]
    fn random_text_never_panics(text in "[ -~\t\n\\\\#=\\[\\]()-]{0,300}", which in 0..NAMES.len()) {
        parse_any(NAMES[which], text.as_bytes(), &text);
    }

    #[test]
    fn mutated_valid_files_never_panic(
        which in 0..5usize,
        edits in proptest::collection::vec((any::<usize>(), 0..4u8, any::<u8>()), 1..8),
        included in "[ -~\n]{0,80}",
    ) {
        let (name, text) = seeds().swap_remove(which);
        let mut bytes = text.into_bytes();
        for (at, op, byte) in edits {
            let at = at % (bytes.len() + 1);
            match op {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => { bytes.remove(at); }
                2 if at < bytes.len() => bytes[at] = byte,
                _ => bytes.truncate(at),
            }
        }
        parse_any(name, &bytes, &included);
        parse_any("upload.bin", &bytes, &included);
    }

    #[test]
    fn truncated_valid_files_never_panic(which in 0..5usize, at in any::<usize>()) {
        let (name, text) = seeds().swap_remove(which);
        let bytes = text.as_bytes();
        parse_any(name, &bytes[..at % (bytes.len() + 1)], "");
    }
}
