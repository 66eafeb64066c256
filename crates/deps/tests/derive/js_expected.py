#!/usr/bin/env python3
"""Derive the exact package sets of the real npm / yarn / pnpm fixtures,
independently of gatehouse's Rust parsers.

Run once by a developer (Python 3.11+, the standard library and PyYAML for
yarn Berry and pnpm); its output is committed and read by
`tests/js_exact_sets.rs`. The tests never run it.

    python3 crates/deps/tests/derive/js_expected.py

For every real fixture `tests/fixtures/<format>/<case...>/<lockfile>` it
writes `tests/fixtures/expected/<format>/<case>.txt` (a case in a nested
folder, `npm/pair-js-yaml-bump/base/`, becomes `pair-js-yaml-bump-base`):
one line per package, `npm<TAB>name<TAB>version`, and for a git
dependency `<TAB>commit` after it (the version empty when the lockfile
records none, the commit empty when it names none), sorted byte-wise, each
line once.

The rules come from each format's documentation and shared/DESIGN.md's
`deps parse` contract (workspace and local-path packages left out, dev /
optional / peer / bundled packages kept, npm aliases under their real name,
each (ecosystem, name, version) once):

- npm v2/v3 (`packages`, preferred whenever present): every key holding
  `node_modules/`; the name is the entry's `name` field when written (an
  alias folder `node_modules/string-width-cjs` records `name: string-width`),
  else the text after the last `node_modules/`. Left out: the root `""` and
  other keys outside any `node_modules/` (workspace folders), `link: true`
  and `file:` sources. Git sources are kept with their `version` and the
  commit after `#` in `resolved` (or `version`). A registry package nested
  inside a workspace folder or inside a git dependency's folder is still a
  registry package.
- npm v1 (`dependencies`, nested recursively): the key is the name; a
  `version` of `npm:real@1.2.3` is an alias, a registry tarball URL
  `.../<name>/-/<base>-<v>.tgz` gives `<v>`, a `file:` path is left out, a
  git / code-host URL is a git dependency with no version and the URL's
  commit.
- yarn v1: each entry is a header line of descriptors `name@range, ...`
  then two-space-indented fields; the name comes from the descriptors (an
  alias `alias@npm:real@range` names `real`), the version from `version`.
  Left out: `file:` / `link:` descriptors or resolutions. Git sources (git
  URLs, GitHub shorthands, code-host tarballs such as codeload.github.com)
  are kept with their `version` and the commit of `resolved`, else of a
  descriptor. Other http(s) tarballs (a mirror) are kept.
- yarn Berry: the `resolution` locator `name@protocol:ref`: `npm:` keeps
  (name, ref); `patch:` wraps a URL-encoded locator, which is unwrapped and
  read again; `workspace:`, `link:`, `portal:`, `file:`, `exec:` are local
  and left out; git locators kept with the entry's `version` and the
  locator's commit; http(s) tarballs kept with the entry's `version`.
- pnpm: every key of `packages` (5.x `/name/1.0.0_peers`, 6.x
  `/name@1.0.0(peers)`, 9.x `name@1.0.0`), peer suffix cut, a leading
  registry host dropped; an entry's own `name` / `version` win over the key.
  Left out: `resolution.directory`, `file:` / `link:` keys or tarballs,
  and `runtime:`. Git (`resolution.commit` / `repo`, code-host tarballs) is
  kept with the entry's `version` and `resolution.commit`, else the
  tarball's commit.
  Every YAML document of the file is read.

Anything in a fixture that these rules do not cover stops the script with an
error instead of being guessed at.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.parse
from pathlib import Path

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("PyYAML is needed: pip install pyyaml")

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
EXPECTED = FIXTURES / "expected"

LOCKFILE_NAMES = {
    "npm": ("package-lock.json", "npm-shrinkwrap.json"),
    "yarn": ("yarn.lock",),
    "pnpm": ("pnpm-lock.yaml",),
}

# semver 2.0.0's grammar (https://semver.org/#backusnaur-form-grammar-for-valid-semver-versions),
# leading zeros tolerated the way registries have published them.
SEMVER = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")


class Unexpected(Exception):
    """Something in a fixture the documented rules do not cover."""


def semver(v: str) -> bool:
    return SEMVER.fullmatch(v) is not None


def split_name(spec: str) -> tuple[str, str]:
    """`name@rest` -> (name, rest); the name may be scoped (`@scope/name`)."""
    at = spec.find("@", 1 if spec.startswith("@") else 0)
    if at <= 0:
        raise Unexpected(f"no name@ in {spec!r}")
    return spec[:at], spec[at + 1 :]


# ------------------------------------------------------------- shared: sources

# npm-package-arg / hosted-git-info: git URLs and shorthands.
GIT_PREFIXES = ("git+", "git:", "git@", "github:", "gitlab:", "bitbucket:", "gist:", "ssh://")
# Hosts whose tarballs are built from a commit, not published to a registry.
CODE_HOSTS = {"github.com", "www.github.com", "codeload.github.com", "gitlab.com", "bitbucket.org"}
# npm/yarn GitHub shorthand `user/repo` or `user/repo#ref` (no scheme, no leading `@`, `.` or `/`).
GITHUB_SHORTHAND = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(?:#.*)?")


def is_git(spec: str) -> bool:
    s = spec.lower()
    if s.startswith(GIT_PREFIXES) or "#commit=" in s:
        return True
    u = urllib.parse.urlsplit(s)
    if u.scheme in ("http", "https"):
        host = (u.hostname or "").lower()
        if host == "gitlab.com" and u.path.startswith("/api/"):
            return False  # GitLab's package registry
        return host in CODE_HOSTS or u.path.endswith(".git")
    return False


HEX = re.compile(r"[0-9a-fA-F]{7,64}")


def commit_of(spec: str) -> str:
    """The commit a git spec names: its `#` fragment (`#commit=<sha>` too) or a
    code host's `/tar.gz/<sha>` path; "" for a branch, tag or nothing."""
    if "#" in spec:
        frag = spec.rsplit("#", 1)[1]
        for part in frag.split("&"):
            if part.startswith("commit="):
                frag = part[len("commit="):]
        return frag if HEX.fullmatch(frag) else ""
    path = urllib.parse.urlsplit(spec).path
    if "/tar.gz/" in path:
        last = path.rsplit("/", 1)[1]
        return last if HEX.fullmatch(last) else ""
    return ""


def git_version(v: str) -> str:
    """A git dependency's version: as recorded, or none when it is a URL / spec."""
    return "" if any(c in v for c in ":/#") else v


def is_local(spec: str) -> bool:
    return spec.startswith(("file:", "link:", "portal:"))


def is_http(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


# ------------------------------------------------------------------------ npm


def registry_tarball_version(name: str, url: str) -> str | None:
    """`<registry>/<name>/-/<base>-<version>.tgz` (scoped names may be `%2f`-encoded)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    before, sep, file = path.rpartition("/-/")
    if not sep or not before.endswith("/" + name):
        return None
    base = name.rsplit("/", 1)[-1]
    if not (file.startswith(base + "-") and file.endswith(".tgz")):
        return None
    v = file[len(base) + 1 : -len(".tgz")]
    return v if semver(v) else None


def npm(path: Path) -> set[tuple[str, ...]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    out: set[tuple[str, ...]] = set()
    if doc.get("packages") is not None:
        if doc.get("lockfileVersion") not in (2, 3):
            raise Unexpected(f"packages in lockfileVersion {doc.get('lockfileVersion')}")
        for key, e in doc["packages"].items():
            if "node_modules/" not in key:
                continue  # the root "" and workspace folders
            if e.get("link"):
                continue  # a symlink to a workspace folder
            resolved = e.get("resolved") or ""
            version = e.get("version")
            if is_local(resolved) or (version and is_local(version)):
                continue
            name = e.get("name") or key.rsplit("node_modules/", 1)[1]
            if is_git(resolved) or (version and is_git(version)):
                out.add((name, git_version(version or ""), commit_of(resolved) or commit_of(version or "")))
                continue
            if not version or not semver(version):
                raise Unexpected(f"{key}: version {version!r}")
            out.add((name, version))
        return out
    if doc.get("lockfileVersion") != 1:
        raise Unexpected(f"no packages in lockfileVersion {doc.get('lockfileVersion')}")

    def walk(deps: dict, trail: str) -> None:
        for name, e in deps.items():
            here = f"{trail}/{name}"
            version = e.get("version") or ""
            if version.startswith("npm:"):
                real, v = split_name(version[len("npm:") :])
                name, version = real, v
            if is_git(version) or is_git(e.get("resolved") or ""):
                resolved = e.get("resolved") or ""
                out.add((name, git_version(version), commit_of(resolved) or commit_of(version)))
            elif is_local(version):
                pass
            elif is_http(version):
                v = registry_tarball_version(name, version)
                if v is None:
                    raise Unexpected(f"{here}: tarball {version!r}")
                out.add((name, v))
            elif semver(version):
                out.add((name, version))
            else:
                raise Unexpected(f"{here}: version {version!r}")
            walk(e.get("dependencies") or {}, here)

    walk(doc.get("dependencies") or {}, "")
    return out


# ----------------------------------------------------------------------- yarn


def yarn_v1_unquote(token: str) -> str:
    token = token.strip()
    if token.startswith('"'):
        return json.loads(token)
    return token


def yarn_v1_header(line: str) -> list[str]:
    """The descriptors of a header line `a@^1, "b@^2":`."""
    body = line.rstrip()
    if not body.endswith(":"):
        raise Unexpected(f"header {line!r}")
    body = body[:-1]
    out, cur, quoted = [], "", False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            out.append(yarn_v1_unquote(cur))
            cur = ""
        else:
            cur += ch
    out.append(yarn_v1_unquote(cur))
    return out


def yarn_v1(text: str) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    entries: list[tuple[int, list[str], dict[str, str]]] = []
    for no, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith(" "):
            entries.append((no, yarn_v1_header(line), {}))
        elif line.startswith("  ") and not line.startswith("   "):
            if not entries:
                raise Unexpected(f"line {no}: field before any header")
            field = line.strip()
            if field.endswith(":"):
                continue  # a block (dependencies:), read no further
            key, _, value = field.partition(" ")
            entries[-1][2][key] = yarn_v1_unquote(value)
    for no, descriptors, fields in entries:
        names, ranges = set(), []
        for d in descriptors:
            name, rng = split_name(d)
            if rng.startswith("npm:") and "@" in rng[len("npm:") + 1 :]:
                name, rng = split_name(rng[len("npm:") :])  # alias@npm:real@range
            elif rng.startswith("npm:"):
                rng = rng[len("npm:") :]
            names.add(name)
            ranges.append(rng)
        if len(names) != 1:
            raise Unexpected(f"line {no}: descriptors name {sorted(names)}")
        name = names.pop()
        version = fields.get("version", "")
        resolved = fields.get("resolved", "")
        if any(is_local(r) for r in ranges) or is_local(resolved):
            continue
        if any(is_git(r) or GITHUB_SHORTHAND.fullmatch(r) for r in ranges) or is_git(resolved):
            commit = commit_of(resolved) or next((commit_of(d) for d in descriptors if commit_of(d)), "")
            out.add((name, git_version(version), commit))
            continue
        if not semver(version):
            raise Unexpected(f"line {no}: version {version!r}")
        if resolved and not is_http(resolved):
            raise Unexpected(f"line {no}: resolved {resolved!r}")
        out.add((name, version))
    return out


BERRY_LOCAL = ("workspace:", "link:", "portal:", "file:", "exec:")


def berry_locator(locator: str, entry: dict, key: str) -> tuple[str, ...] | None:
    name, ref = split_name(locator)
    if ref.startswith("npm:"):
        v = ref[len("npm:") :]
        if not semver(v):
            raise Unexpected(f"{key}: npm locator {locator!r}")
        return name, v
    if ref.startswith("patch:"):
        inner = ref[len("patch:") :].split("#", 1)[0]
        return berry_locator(urllib.parse.unquote(inner), entry, key)
    if ref.startswith(BERRY_LOCAL):
        return None
    if is_git(ref) or ref.startswith(("git@", "github:")):
        return name, git_version(str(entry.get("version", ""))), commit_of(ref)
    if is_http(ref):
        v = str(entry.get("version", ""))
        if not semver(v):
            raise Unexpected(f"{key}: tarball without a version")
        return name, v
    raise Unexpected(f"{key}: locator {locator!r}")


def yarn_berry(text: str) -> set[tuple[str, ...]]:
    doc = yaml.safe_load(text)
    out: set[tuple[str, ...]] = set()
    for key, entry in doc.items():
        if key == "__metadata":
            continue
        got = berry_locator(entry["resolution"], entry, key)
        if got:
            out.add(got)
    return out


def yarn(path: Path) -> set[tuple[str, ...]]:
    text = path.read_text(encoding="utf-8")
    if re.search(r"^__metadata:", text, re.M):
        return yarn_berry(text)
    if "# yarn lockfile v1" not in text:
        raise Unexpected("neither yarn v1 nor Berry")
    return yarn_v1(text)


# ----------------------------------------------------------------------- pnpm


def pnpm_key(key: str, major: int) -> tuple[str, str]:
    """(name, version) of a `packages` key, peer suffix cut, host dropped."""
    if key.startswith(("file:", "link:")) or "@file:" in key or "@link:" in key:
        raise Unexpected(f"{key}: local key not handled")
    if major >= 9:
        name, version = split_name(key)
    else:
        if not key.startswith("/"):
            key = key[key.index("/") :]  # `registry.example/foo/1.0.0`: host dropped
        body = key[1:]
        if major >= 6:
            name, version = split_name(body)
        else:
            parts = body.split("/")
            n = 2 if body.startswith("@") else 1
            name, version = "/".join(parts[:n]), "/".join(parts[n:])
            version = version.split("_", 1)[0]  # 5.x peer suffix `_react@18.0.0` / `_<hash>`
    version = version.split("(", 1)[0]  # 6.x/9.x peer suffix `(react@18.0.0)`
    return name, version


def pnpm(path: Path) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc:
            continue
        major = int(str(doc["lockfileVersion"]).split(".")[0])
        for key, entry in (doc.get("packages") or {}).items():
            entry = entry or {}
            res = entry.get("resolution") or {}
            tarball = res.get("tarball", "")
            if "directory" in res or is_local(tarball) or key.startswith(("file:", "link:")):
                continue
            if "commit" in res or "repo" in res or is_git(tarball):
                commit = res.get("commit") or commit_of(tarball)
                out.add((entry["name"], git_version(str(entry.get("version", ""))), commit))
                continue
            if key.startswith("runtime:") or "@runtime:" in key:
                continue
            name, version = pnpm_key(key, major)
            name = entry.get("name", name)
            version = str(entry.get("version", version))
            if not semver(version):
                raise Unexpected(f"{key}: version {version!r}")
            out.add((name, version))
    return out


# ----------------------------------------------------------------------- main

READERS = {"npm": npm, "yarn": yarn, "pnpm": pnpm}


def main() -> int:
    written = []
    for fmt, names in LOCKFILE_NAMES.items():
        (EXPECTED / fmt).mkdir(parents=True, exist_ok=True)
        for lock in sorted(p for n in names for p in (FIXTURES / fmt).rglob(n)):
            case = "-".join(lock.parent.relative_to(FIXTURES / fmt).parts)
            try:
                pkgs = READERS[fmt](lock)
            except Unexpected as e:
                print(f"{lock}: {e}", file=sys.stderr)
                return 1
            if not pkgs:
                print(f"{lock}: no packages", file=sys.stderr)
                return 1
            lines = sorted({("\t".join(("npm",) + p) + "\n").encode() for p in pkgs})
            (EXPECTED / fmt / f"{case}.txt").write_bytes(b"".join(lines))
            written.append((f"{fmt}/{case}", len(lines)))
    for case, count in written:
        print(f"{count:6}  {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
