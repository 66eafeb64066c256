#!/usr/bin/env bash
# What durable state costs the door, all in one run on this machine: allowed
# proxied traffic through this build (policies from the store through the
# node's replica, every refusal queued, batched and chained into the audit
# log in the embedded SQLite store) beside the same traffic through a
# reference build that kept policies and refusals in memory, first alone,
# then while a second grant floods the door with refused requests.
#
#   bash bench/durable.sh           # REF=cc33d5e (the last in-memory commit), 3 rounds of 10 s
#   REF=74a6cac bash bench/durable.sh   # beside the build before the listener and SNI changes
#
# It ends with CONNECT bulk downloads through both builds' tunnels.
#
# Needs wrk and nginx-light (installed if missing) and builds both binaries
# in release mode (the reference once, in target/bench-ref, from a git
# worktree: nothing is downloaded but crates.io's crates).
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${REF:-cc33d5e}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
ROUNDS=${ROUNDS:-3}
# The flood: FLOOD_CONNS connections, each pausing FLOOD_DELAY_MS between
# refused requests: at most FLOOD_CONNS * 1000 / FLOOD_DELAY_MS a second.
FLOOD_CONNS=${FLOOD_CONNS:-20}
FLOOD_DELAY_MS=${FLOOD_DELAY_MS:-2}

source bench/lib.sh
cargo build --release --locked --bin gatehouse -q
ref_bin="target/bench-ref/$REF/release/gatehouse"
if [ ! -x "$ref_bin" ]; then
  git worktree add --detach -f "$work/ref-src" "$REF" >/dev/null
  (cd "$work/ref-src" && CARGO_TARGET_DIR="$OLDPWD/target/bench-ref/$REF" cargo build --release --locked --bin gatehouse -q)
  git worktree remove --force "$work/ref-src"
fi
start_upstream

# Tenant "bench" may reach the upstream; tenant "flood" may reach nothing it
# asks for, so each of its requests is a policy refusal of an authenticated
# run, the kind the store must never drop.
for node in ref cur; do
  bin=$([ $node = ref ] && echo "$ref_bin" || echo ./target/release/gatehouse)
  start_gatehouse $node "$bin"
  api $node PUT /v1/tenants/bench/egress-policy '{"mode":"allowlist","allow":["127.0.0.1"]}' >/dev/null
  api $node PUT /v1/tenants/flood/egress-policy '{"mode":"allowlist","allow":["only.example"]}' >/dev/null
  printf -v "${node}_GRANT" %s "$(grant $node bench)"
  printf -v "${node}_FLOOD" %s "$(grant $node flood)"
done
for node in ref cur; do
  px="${node}_PX"; g="${node}_GRANT"; f="${node}_FLOOD"
  curl -sf -o /dev/null -x "http://grant:${!g}@127.0.0.1:${!px}" "http://127.0.0.1:$UP/" || { echo "$node: allowed request failed"; cat "$work/$node.log"; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' -x "http://grant:${!f}@127.0.0.1:${!px}" "http://127.0.0.1:$UP/")
  [ "$code" = 403 ] || { echo "$node: flood request answered $code, not 403"; exit 1; }
done

cat > "$work/proxy.lua" <<LUA
wrk.path = "http://127.0.0.1:$UP/"
wrk.headers["Proxy-Authorization"] = os.getenv("PROXY_AUTH")
LUA
cat > "$work/flood.lua" <<LUA
wrk.path = "http://127.0.0.1:$UP/"
wrk.headers["Proxy-Authorization"] = os.getenv("PROXY_AUTH")
function delay() return $FLOOD_DELAY_MS end
LUA
allowed() { PROXY_AUTH="Bearer $2" wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$work/proxy.lua" "http://127.0.0.1:$1" 2>&1 | parse; }
# The flood starts a second before the measured traffic and ends after it.
flooded() {
  local secs=${DURATION%s}
  PROXY_AUTH="Bearer $3" wrk -t1 -c"$FLOOD_CONNS" -d"$((secs + 2))s" -s "$work/flood.lua" "http://127.0.0.1:$1" >"$work/flood.out" 2>&1 &
  local flood=$!
  sleep 1
  allowed "$1" "$2"
  wait $flood
  awk '/Requests\/sec/ {print $2}' "$work/flood.out" >>"$work/flood-rates"
  awk '/requests in/ {print $1}' "$work/flood.out" >>"$work/flood-sent-$4"
}

: >"$work/results"; : >"$work/flood-rates"; : >"$work/flood-sent-ref"; : >"$work/flood-sent-cur"
for round in $(seq "$ROUNDS"); do
  echo "ref $(allowed "$ref_PX" "$ref_GRANT")" >>"$work/results"
  echo "cur $(allowed "$cur_PX" "$cur_GRANT")" >>"$work/results"
  echo "ref_flood $(flooded "$ref_PX" "$ref_GRANT" "$ref_FLOOD" ref)" >>"$work/results"
  echo "cur_flood $(flooded "$cur_PX" "$cur_GRANT" "$cur_FLOOD" cur)" >>"$work/results"
done

# What the durable node kept: every refusal of the flood grant is a run
# event, which the queue must never drop, so all of them reach the store.
sleep 3
dropped=$(curl -s "http://127.0.0.1:$cur_API/metrics" | awk '/^gatehouse_events_dropped_total/ {s += $2} END {print s + 0}')
stored=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from events where tenant_id = ?", ("flood",)).fetchone()[0])' "$work/cur-data/gatehouse.db")
sent=$(awk '{s += $1} END {print s}' "$work/flood-sent-cur")

python3 - "$work/results" "$work/flood-rates" "$dropped" "$stored" "$sent" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for name, rps, p50, p99 in rows:
    by.setdefault(name, []).append((float(rps), p50, p99))
labels = {"ref": "reference build", "cur": "this build", "ref_flood": "reference, flooded", "cur_flood": "this build, flooded"}
print(f"{'allowed traffic':<22} {'requests/s (median)':>20} {'p50':>9} {'p99':>9}   all rounds")
for name in ("ref", "cur", "ref_flood", "cur_flood"):
    runs = sorted(by[name])
    rps, p50, p99 = runs[len(runs) // 2]
    print(f"{labels[name]:<22} {rps:>20.0f} {p50:>9} {p99:>9}   {', '.join(f'{r[0]:.0f}' for r in by[name])}")
rounds = list(zip(by["ref"], by["cur"], by["ref_flood"], by["cur_flood"]))
ratio = lambda i, j: statistics.median(r[i][0] / r[j][0] for r in rounds)
rates = [float(l) for l in open(sys.argv[2]) if l.strip()]
print(f"flood: refused requests/s per round: {', '.join(f'{r:.0f}' for r in rates)}")
print(f"this build / reference, alone:          {ratio(1, 0):.2f}  (target >= 0.95)")
print(f"this build / reference, both flooded:   {ratio(3, 2):.2f}  (target >= 0.90)")
print(f"this build flooded / reference alone:   {ratio(3, 0):.2f}")
print(f"this build flooded / itself alone:      {ratio(3, 1):.2f}")
print(f"this build: {sys.argv[5]} flood requests sent, {sys.argv[4]} refusals stored, {sys.argv[3]} events dropped")
PY

# CONNECT bulk through each build's tunnel (plain HTTP inside, so the
# tunnel's own work is measured): five interleaved 512 MiB downloads each,
# after one untimed read that fills the page cache.
speed() { curl -s -o /dev/null -w '%{speed_download}' "$@"; }
speed "http://127.0.0.1:$UP/big" >/dev/null
: >"$work/bulk"
for round in 1 2 3 4 5; do
  echo "$(speed -p -x "http://grant:$ref_GRANT@127.0.0.1:$ref_PX" "http://127.0.0.1:$UP/big") \
$(speed -p -x "http://grant:$cur_GRANT@127.0.0.1:$cur_PX" "http://127.0.0.1:$UP/big")" >>"$work/bulk"
done
python3 - "$work/bulk" <<'PY'
import statistics, sys
rounds = [[float(v) for v in l.split()] for l in open(sys.argv[1]) if l.strip()]
for i, name in enumerate(("reference tunnel", "this build's tunnel")):
    print(f"CONNECT bulk, {name:<20} {statistics.median(r[i] for r in rounds) / 2**20:6.0f} MiB/s   rounds: "
          + ", ".join(f"{r[i] / 2**20:.0f}" for r in rounds))
print(f"CONNECT bulk, this build / reference:   {statistics.median(r[1] / r[0] for r in rounds):.2f}")
PY
