#!/usr/bin/env bash
# A scan's memory through the API: the peak resident size of `gatehouse
# serve` (release) while it scans one large submission, then two at once,
# each on a fresh node, against the offline OSV database.
#
#   bash bench/deps-memory.sh                  # MB=25 (decoded lockfile), OSV_DB=../shared/osv
#
# The submission is one npm lockfile v2 (both `packages` and v1's
# `dependencies`, as npm 7-8 write it) of unique packages, MB megabytes
# decoded, base64 in the body (about 4/3 of it). The node's own peak before
# the scan (the database loaded, nothing submitted) is read from
# /proc/PID/status (VmHWM); the peak after, from `/usr/bin/time -v`
# ("Maximum resident set size") when the node stops. What the scan cost
# is the difference.
set -euo pipefail
cd "$(dirname "$0")/.."
OSV_DB=${OSV_DB:-../shared/osv}
MB=${MB:-25}
CONCURRENCY=${CONCURRENCY:-}  # GATEHOUSE_DEPS_SCAN_CONCURRENCY, when set
[ -n "${BIN:-}" ] || cargo build --release --locked --bin gatehouse -q
bin=${BIN:-$PWD/target/release/gatehouse}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

KIND=${KIND:-npm}
FIXTURES=${FIXTURES:-../shared/fixtures/lockfiles}
python3 - "$MB" "$work/scan.json" "$KIND" "$FIXTURES" <<'PY'
import base64, json, os, sys
target, out, kind, root = int(sys.argv[1]) << 20, sys.argv[2], sys.argv[3], sys.argv[4]
if kind == "fixtures":
    # Every real lockfile of the fixtures (every format), copies under
    # other directories until MB megabytes (at most 100 lockfiles).
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f != "SOURCES.md")
    lockfiles, size, copy = [], 0, 0
    while size < target and len(lockfiles) < 100:
        for f in files:
            if size >= target or len(lockfiles) >= 100:
                break
            data = open(f, "rb").read()
            lockfiles.append({"path": f"c{copy}/{os.path.relpath(f, root)}", "head_base64": base64.b64encode(data).decode()})
            size += len(data)
        copy += 1
    body = {"repository": "bench/app", "pull_request": 1, "head_sha": "0" * 40, "lockfiles": lockfiles}
    json.dump(body, open(out, "w"))
    print(f"{len(lockfiles)} lockfiles, {size / 1e6:.1f} MB; submission {len(json.dumps(body)) / 1e6:.1f} MB")
    sys.exit(0)
packages, dependencies = {"": {"name": "app", "version": "1.0.0"}}, {}
size, i = 0, 0
while size < target:
    name, version = f"pkg-{i:06d}", f"{i % 7}.{i % 13}.{i % 5}"
    url = f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
    integrity = "sha512-" + base64.b64encode(i.to_bytes(8, "big") * 8).decode()
    requires = {f"pkg-{(i * 7 + k) % 100000:06d}": "^1.0.0" for k in range(3)}
    packages[f"node_modules/{name}"] = {"version": version, "resolved": url, "integrity": integrity,
                                        "dev": i % 2 == 0, "dependencies": requires}
    dependencies[name] = {"version": version, "resolved": url, "integrity": integrity,
                          "dev": i % 2 == 0, "requires": requires}
    size += 2 * (len(name) + len(version) + len(url) + len(integrity) + 200)
    i += 1
lock = json.dumps({"name": "app", "version": "1.0.0", "lockfileVersion": 2, "requires": True,
                   "packages": packages, "dependencies": dependencies}, indent=2).encode()
body = {"repository": "bench/app", "pull_request": 1, "head_sha": "0" * 40,
        "lockfiles": [{"path": "package-lock.json", "head_base64": base64.b64encode(lock).decode()}]}
json.dump(body, open(out, "w"))
print(f"lockfile {len(lock) / 1e6:.1f} MB, {i} packages; submission {len(json.dumps(body)) / 1e6:.1f} MB")
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
hwm_kb() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

# run N: a fresh node scans N copies of the submission at once.
run() {
  local n=$1 dir="$work/node$1" port proxy timer pid token idle started took peak curls=()
  mkdir -p "$dir"
  port=$(free_port); proxy=$(free_port)
  env GATEHOUSE_DATA_DIR="$dir/gatehouse-data" GATEHOUSE_OSV_DB="$OSV_DB" GATEHOUSE_LISTEN=127.0.0.1:$port \
    GATEHOUSE_PROXY_LISTEN=127.0.0.1:$proxy ${CONCURRENCY:+GATEHOUSE_DEPS_SCAN_CONCURRENCY=$CONCURRENCY} \
    /usr/bin/time -v -o "$dir/time.txt" "$bin" serve >"$dir/serve.log" 2>&1 &
  timer=$!
  for _ in $(seq 1500); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
  pid=$(pgrep -P "$timer") || { echo "the node did not start:"; cat "$dir/serve.log" "$dir/time.txt"; exit 1; }
  idle=$(hwm_kb "$pid")
  token=$(cat "$dir/gatehouse-data/service-token")
  started=$(date +%s.%N)
  for i in $(seq "$n"); do
    curl -s -o "$dir/answer.$i.json" -w '%{http_code}\n' -X POST -H "authorization: Bearer $token" \
      -H 'content-type: application/json' --data-binary @"$work/scan.json" \
      "http://127.0.0.1:$port/v1/tenants/bench/dependency-scans" >>"$dir/codes.txt" &
    curls+=($!)
  done
  wait "${curls[@]}"
  took=$(python3 -c "import time; print(f'{time.time() - $started:.1f}')")
  kill -INT "$pid"; wait "$timer" 2>/dev/null || true
  peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.txt")
  printf '%d at once: answers %s in %s s; idle peak %d MB, peak %d MB, the scans %d MB\n' \
    "$n" "$(sort "$dir/codes.txt" | uniq -c | tr -s ' ' | tr '\n' ' ')" "$took" \
    $((idle / 1024)) $((peak / 1024)) $(((peak - idle) / 1024))
}
OSV_DB=$(cd "$OSV_DB" && pwd)
run 1
run 2
