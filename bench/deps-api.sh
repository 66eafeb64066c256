#!/usr/bin/env bash
# A pull request's scan through the API beside the same scan on the command
# line, in one run on this machine: ten real lockfiles (npm, yarn v1 and
# Berry, pnpm, poetry, Cargo, Gemfile, go.sum, requirements), no base (so
# every pinned version is checked), against the offline OSV database.
#
#   bash bench/deps-api.sh                     # OSV_DB=../shared/osv, 10 runs each
#
# The command line loads the database on every invocation; the server
# loaded it once at start. So the command line is reported twice: as run,
# and less its own database load, measured as the same command scanning a
# requirements file of one pin. The ratio that counts is the second one: the scan's own
# work, through the API (JSON, base64, the store, the audit entry) beside
# the command line's.
#
# Needs hyperfine (installed if missing); builds the release binary.
set -euo pipefail
cd "$(dirname "$0")/.."
OSV_DB=${OSV_DB:-../shared/osv}
FIXTURES=${FIXTURES:-../shared/fixtures/lockfiles}
RUNS=${RUNS:-10}
command -v hyperfine >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q hyperfine >/dev/null
cargo build --release --locked --bin gatehouse -q
bin=$PWD/target/release/gatehouse
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

lockfiles=(
  npm/dependency-review-action-v2/package-lock.json
  npm/checkout-v1/package-lock.json
  yarn/webpack-v1-aliases-git/yarn.lock
  yarn/prettier-berry-v10/yarn.lock
  pnpm/vue-core-v9.0/pnpm-lock.yaml
  poetry/poetry-2.x-lock-2.1/poetry.lock
  cargo/linkerd2-proxy-v4/Cargo.lock
  gemfile/rubygems-org/Gemfile.lock
  gosum/osv-scanner/go.sum
  requirements/warehouse-main-hashes/requirements.txt
)
python3 - "$FIXTURES" "$work/scan.json" "${lockfiles[@]}" <<'PY'
import base64, json, sys
root, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
lockfiles = [{"path": f"{i}/{f.split('/')[-1]}", "head_base64": base64.b64encode(open(f"{root}/{f}", "rb").read()).decode()}
             for i, f in enumerate(files)]
json.dump({"repository": "bench/app", "pull_request": 1, "head_sha": "0" * 40, "lockfiles": lockfiles}, open(out, "w"))
PY
# One pin, so the database is loaded and one version matched.
printf 'six==1.16.0\n' > "$work/requirements.txt"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
proxy=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work" && GATEHOUSE_OSV_DB="$OLDPWD/$OSV_DB" GATEHOUSE_LISTEN=127.0.0.1:$port GATEHOUSE_PROXY_LISTEN=127.0.0.1:$proxy \
  "$bin" serve >"$work/serve.log" 2>&1) &
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
token=$(cat "$work/gatehouse-data/service-token")
api="curl -sf -o /dev/null -X POST -H 'authorization: Bearer $token' -H 'content-type: application/json' --data-binary @$work/scan.json http://127.0.0.1:$port/v1/tenants/bench/dependency-scans"
eval "$api" || { echo "the API scan failed"; cat "$work/serve.log"; exit 1; }

cli=""
for f in "${lockfiles[@]}"; do
  cli+="$bin deps scan --osv-db $OSV_DB --gate off --format json $FIXTURES/$f >/dev/null; "
done
load=""
for _ in "${lockfiles[@]}"; do
  load+="$bin deps scan --osv-db $OSV_DB --gate off --format json $work/requirements.txt >/dev/null; "
done
# deps scan exits 1 or 2 when a scan trips or errors; that is not a failure here.
hyperfine -N --warmup 1 --runs "$RUNS" -i --export-json "$work/times.json" \
  -n api "$api" -n cli "bash -c '$cli'" -n cli-load "bash -c '$load'" >/dev/null
python3 - "$work/times.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
api, cli, load = (r[k]["median"] for k in ("api", "cli", "cli-load"))
print(f"API, one scan of 10 lockfiles           {api*1000:8.1f} ms (median)")
print(f"command line, 10 scans                  {cli*1000:8.1f} ms")
print(f"command line, 10 database loads only    {load*1000:8.1f} ms")
print(f"API / command line, as run:             {cli/api:6.2f}x")
print(f"API / command line less its loads:      {(cli-load)/api:6.2f}x  (target >= 0.8)")
PY
