#!/usr/bin/env python3
"""Derive the exact package sets of the real requirements / poetry / go.sum /
Cargo.lock / Gemfile.lock fixtures, independently of gatehouse's Rust parsers.

Run once by a developer (Python 3.11+, standard library only); its output is
committed and read by `tests/other_exact_sets.rs`. The tests never run it.

    python3 crates/deps/tests/derive/other_expected.py

For every real fixture `tests/fixtures/<format>/<case>/<lockfile>` (folders
named `peer-*` are peer-project test data and are skipped) it writes
`tests/fixtures/expected/<format>/<case>.txt`: one line per package,
`ecosystem<TAB>name<TAB>version`, sorted byte-wise, each line once.

The rules come from each format's own documentation (and
shared/DESIGN.md's `deps parse` contract: local/workspace packages left out,
PyPI names PEP 503-normalized, versions as the lockfile writes them, platform
suffixes not part of a version):

- requirements.txt: pip's "Requirements File Format" (line joining, comment
  stripping, requirement = the words before the first one starting with `-`,
  `-r`/`-c` includes read relative to the including file) and PEP 508 for the
  requirement itself. Only `==` without a wildcard and `===` are exact pins;
  markers are not evaluated, so a package pinned under several markers yields
  every pinned version. Names normalized per PEP 503.
- poetry.lock: every `[[package]]` (name PEP 503-normalized, version as
  written) except `source.type` `directory` / `file` (local code).
- go.sum: `module version hash` lines; `version/go.mod` lines hash only the
  go.mod file, so a module version seen only with `/go.mod` was never
  downloaded and is left out. Versions keep their `v`.
- Cargo.lock: every `[[package]]` with a `source`, except `path+` sources;
  packages without `source` are workspace members / path dependencies.
- Gemfile.lock: Bundler's LockfileParser: specs at four spaces under
  `  specs:` in `GEM`, `GIT`, `PLUGIN SOURCE` sections (`PATH` = local gems,
  left out); `name (version[-platform])`, the version ending at the first `-`.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
EXPECTED = FIXTURES / "expected"


def pep503(name: str) -> str:
    """PEP 503 normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- requirements.txt

# pip/_internal/req/req_file.py
COMMENT_RE = re.compile(r"(^|\s+)#.*$")
ENV_VAR_RE = re.compile(r"(?P<var>\$\{(?P<name>[A-Z0-9_]+)\})")

# PEP 508 (without evaluating markers).
PEP508_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
EXTRAS = r"\[\s*(?:" + PEP508_NAME + r"(?:\s*,\s*" + PEP508_NAME + r")*)?\s*\]"
REQ_HEAD_RE = re.compile(r"^\s*(?P<name>" + PEP508_NAME + r")\s*(?:" + EXTRAS + r")?\s*")
# PEP 440 version as allowed after a comparison operator; `===` takes any
# string without whitespace, `,` or `;`.
CLAUSE_RE = re.compile(
    r"^\s*(?:(?P<arb>===)\s*(?P<arbv>[^\s,;()]+)"
    r"|(?P<op>==|!=|<=|>=|~=|<|>)\s*(?P<ver>[A-Za-z0-9][A-Za-z0-9._+!*-]*))\s*$"
)


def join_lines(lines: list[str]) -> list[tuple[int, str]]:
    """pip's join_lines: a line ending in `\\` continues; a comment line never does."""
    out: list[tuple[int, str]] = []
    new_line: list[str] = []
    primary = 0
    for number, line in enumerate(lines, start=1):
        if not line.endswith("\\") or COMMENT_RE.match(line):
            if COMMENT_RE.match(line):
                line = " " + line
            if new_line:
                new_line.append(line)
                out.append((primary, "".join(new_line)))
                new_line = []
            else:
                out.append((number, line))
        else:
            if not new_line:
                primary = number
            new_line.append(line.strip("\\"))
    if new_line:
        out.append((primary, "".join(new_line)))
    return out


def break_args_options(line: str) -> tuple[str, str]:
    """pip: the requirement is every token before the first starting with `-`."""
    tokens = line.split(" ")
    args = []
    options = tokens[:]
    for token in tokens:
        if token.startswith("-"):
            break
        args.append(token)
        options.pop(0)
    return " ".join(args), " ".join(options)


def pep508_pins(req: str, where: str) -> list[tuple[str, str]]:
    """(normalized name, version) for each exact pin of a PEP 508 requirement."""
    # The marker follows `;` (for a URL requirement, `; ` so that a `;` in a URL is kept).
    head = REQ_HEAD_RE.match(req)
    if head is None:
        raise SystemExit(f"{where}: not a PEP 508 requirement: {req!r}")
    name = head.group("name")
    rest = req[head.end():]
    if rest.startswith("@"):
        return []  # a direct URL reference: not a pinned version
    spec = rest.split(";", 1)[0].strip()
    if not spec:
        return []  # a bare name
    if spec.startswith("(") and spec.endswith(")"):
        spec = spec[1:-1]
    pins = []
    for clause in spec.split(","):
        m = CLAUSE_RE.match(clause)
        if m is None:
            raise SystemExit(f"{where}: not a version clause: {clause!r}")
        if m.group("arb"):
            pins.append((pep503(name), m.group("arbv")))
        elif m.group("op") == "==" and "*" not in m.group("ver"):
            pins.append((pep503(name), m.group("ver")))
    return pins


URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz")


def looks_like_path(s: str) -> bool:
    """pip's _looks_like_path, and archive file names."""
    return "/" in s or "\\" in s or s.startswith(".") or s.endswith(ARCHIVES)


INCLUDE_OPTS = {"-r", "--requirement", "-c", "--constraint"}


def requirements(path: Path, seen: set[Path] | None = None) -> set[tuple[str, str]]:
    seen = set() if seen is None else seen
    real = path.resolve()
    if real in seen:
        return set()
    seen.add(real)
    out: set[tuple[str, str]] = set()
    text = path.read_text(encoding="utf-8")
    text = text.removeprefix("\ufeff")
    for number, line in join_lines(text.splitlines()):
        line = COMMENT_RE.sub("", line).strip()
        if not line:
            continue
        where = f"{path}:{number}"
        if ENV_VAR_RE.search(line):
            raise SystemExit(f"{where}: uses an environment variable; cannot be derived")
        args, options = break_args_options(line)
        if args:
            if URL_RE.match(args) or args.startswith("file:"):
                continue  # a URL: not a pinned version
            if looks_like_path(args) and not REQ_HEAD_RE.fullmatch(args.split(";", 1)[0].split("=", 1)[0]):
                continue  # a local directory or archive: not a pinned version
            out |= set(pep508_pins(args, where))
            continue
        # An options line: only includes can add packages.
        words = options.split()
        i = 0
        while i < len(words):
            w = words[i]
            value = None
            for opt in INCLUDE_OPTS:
                if w == opt:
                    value = words[i + 1] if i + 1 < len(words) else None
                    i += 1
                elif opt.startswith("--") and w.startswith(opt + "="):
                    value = w[len(opt) + 1 :]
                elif not opt.startswith("--") and w.startswith(opt) and len(w) > 2:
                    value = w[2:]
            if value is not None:
                target = Path(value) if os.path.isabs(value) else path.parent / value
                out |= requirements(target, seen)
            i += 1
    return out


# ---------------------------------------------------------------- poetry.lock


def poetry(path: Path) -> set[tuple[str, str]]:
    with path.open("rb") as f:
        lock = tomllib.load(f)
    out = set()
    for pkg in lock.get("package", []):
        kind = pkg.get("source", {}).get("type")
        if kind in ("directory", "file"):
            continue  # the project itself or a local path
        out.add((pep503(pkg["name"]), pkg["version"]))
    return out


# ---------------------------------------------------------------- go.sum


def gosum(path: Path) -> set[tuple[str, str]]:
    content: set[tuple[str, str]] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3:
            raise SystemExit(f"{path}:{number}: not `module version hash`")
        module, version, _hash = fields
        if version.endswith("/go.mod"):
            continue  # the go.mod file's hash alone
        content.add((module, version))
    return content


# ---------------------------------------------------------------- Cargo.lock


def cargo(path: Path) -> set[tuple[str, str]]:
    with path.open("rb") as f:
        lock = tomllib.load(f)
    out = set()
    for pkg in lock.get("package", []):
        source = pkg.get("source")
        if source is None or source.startswith("path+"):
            continue  # workspace member or path dependency
        out.add((pkg["name"], pkg["version"]))
    return out


# ---------------------------------------------------------------- Gemfile.lock

# bundler/lib/bundler/lockfile_parser.rb
NAME_VERSION = re.compile(r"^( {2}| {4}| {6})(?! )(.*?)(?: \(([^-]*)(?:-(.*))?\))?(!)?$")
SOURCES = {"GIT": True, "GEM": True, "PLUGIN SOURCE": True, "PATH": False}


def gemfile(path: Path) -> set[tuple[str, str]]:
    out = set()
    keep = None  # None: not in a source section
    in_specs = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            keep = SOURCES.get(line.rstrip())
            in_specs = False
            continue
        if keep is None:
            continue
        if line.startswith("  ") and not line.startswith("   "):
            in_specs = line.strip() == "specs:"
            continue
        if not in_specs:
            continue
        m = NAME_VERSION.match(line)
        if m is None:
            raise SystemExit(f"{path}: not a spec line: {line!r}")
        if len(m.group(1)) == 4 and keep:
            name, version = m.group(2), m.group(3)
            if version is None:
                raise SystemExit(f"{path}: a spec without a version: {line!r}")
            out.add((name, version))
    return out


# ---------------------------------------------------------------- driver

FORMATS = {
    # folder: (lockfile name, ecosystem, derivation)
    "requirements": ("requirements.txt", "PyPI", requirements),
    "poetry": ("poetry.lock", "PyPI", poetry),
    "gosum": ("go.sum", "Go", gosum),
    "cargo": ("Cargo.lock", "crates.io", cargo),
    "gemfile": ("Gemfile.lock", "RubyGems", gemfile),
}


def main() -> int:
    for folder, (lockfile, ecosystem, derive) in FORMATS.items():
        out_dir = EXPECTED / folder
        out_dir.mkdir(parents=True, exist_ok=True)
        for case in sorted((FIXTURES / folder).iterdir()):
            if not case.is_dir() or case.name.startswith("peer-"):
                continue
            packages = derive(case / lockfile)
            lines = sorted({f"{ecosystem}\t{n}\t{v}\n".encode() for n, v in packages})
            (out_dir / f"{case.name}.txt").write_bytes(b"".join(lines))
            print(f"{folder}/{case.name}: {len(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
