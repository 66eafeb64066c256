#!/usr/bin/env bash
# Forward-proxy load benchmark, all in one run on this machine:
#   direct to a local nginx, through the gatehouse proxy, and through Squid
#   (allow-all ACL, no cache, no access log), with wrk. Prints requests/s,
#   p50/p99 latency and the ratios. Needs: wrk, nginx-light, squid (Debian
#   packages; installed here if missing) and a release build of gatehouse.
#
#   bash bench/proxy.sh            # 3 rounds of 10 s per target, 50 connections, 2 threads
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
ROUNDS=${ROUNDS:-3}
HALF_CONNS=${HALF_CONNS:-20}

source bench/lib.sh
cargo build --release --locked --bin gatehouse -q
start_upstream

# Squid: allow everything, cache nothing, log nothing.
SQ=$(free_port)
mkdir -p "$work/squid" && chmod 777 "$work/squid"
cat > "$work/squid.conf" <<CONF
http_port 127.0.0.1:$SQ
http_access allow all
cache deny all
access_log none
cache_log $work/squid/cache.log
pid_filename $work/squid/squid.pid
coredump_dir $work/squid
CONF
squid -N -f "$work/squid.conf" 2>/dev/null & pids+=($!)

# gatehouse: all roles on loopback, the upstream's range opened explicitly.
start_gatehouse gh ./target/release/gatehouse
PX=$gh_PX
GRANT=$(grant gh bench)
curl -sf -o /dev/null -x "http://grant:$GRANT@127.0.0.1:$PX" "http://127.0.0.1:$UP/" || { echo "proxy check failed"; cat "$work/gh.log"; exit 1; }
curl -sf -o /dev/null -x "http://127.0.0.1:$SQ" "http://127.0.0.1:$UP/" || { echo "squid check failed"; exit 1; }

# wrk speaks to a proxy when the request line carries the absolute URL.
cat > "$work/proxy.lua" <<LUA
wrk.path = "http://127.0.0.1:$UP/"
local auth = os.getenv("PROXY_AUTH")
if auth and auth ~= "" then wrk.headers["Proxy-Authorization"] = auth end
LUA
run() { wrk -t2 -c"$CONNS" -d"$DURATION" --latency "$@" 2>&1; }

# Rounds interleave the three targets so that a noisy neighbour on this
# shared machine hits all of them alike; the report is each target's median
# round and the median of the per-round ratios.
: >"$work/results"
for round in $(seq "$ROUNDS"); do
  echo "direct $(run "http://127.0.0.1:$UP/" | parse)" >>"$work/results"
  echo "gatehouse $(PROXY_AUTH="Bearer $GRANT" run -s "$work/proxy.lua" "http://127.0.0.1:$PX" | parse)" >>"$work/results"
  echo "squid $(PROXY_AUTH="" run -s "$work/proxy.lua" "http://127.0.0.1:$SQ" | parse)" >>"$work/results"
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for name, rps, p50, p99 in rows:
    by.setdefault(name, []).append((float(rps), p50, p99))
print(f"{'target':<12} {'requests/s (median)':>20} {'p50':>9} {'p99':>9}   all rounds")
for name in ("direct", "gatehouse", "squid"):
    runs = sorted(by[name])
    rps, p50, p99 = runs[len(runs) // 2]
    print(f"{name:<12} {rps:>20.0f} {p50:>9} {p99:>9}   {', '.join(f'{r[0]:.0f}' for r in by[name])}")
rounds = list(zip(by["direct"], by["gatehouse"], by["squid"]))
gd = statistics.median(g[0] / d[0] for d, g, s in rounds)
sd = statistics.median(s[0] / d[0] for d, g, s in rounds)
gs = statistics.median(g[0] / s[0] for d, g, s in rounds)
print(f"median ratios: gatehouse / direct {gd:.2f}   squid / direct {sd:.2f}   gatehouse / squid {gs:.2f}")
open(sys.argv[1] + ".peak", "w").write(str(sorted(r[0] for r in by["gatehouse"])[len(rounds) // 2]))
PY

# Latency at half of gatehouse's peak: each of HALF_CONNS connections waits
# between its requests (wrk's delay hook, whole milliseconds), so the offered
# rate is about half the peak for direct and proxied runs alike; the added
# p99 is the difference.
PEAK=$(cat "$work/results.peak")
DELAY_MS=$(python3 -c "print(max(1, round($HALF_CONNS / ($PEAK / 2) * 1000 - 0.5)))")
cat > "$work/half.lua" <<LUA
wrk.path = os.getenv("TARGET_PATH")
local auth = os.getenv("PROXY_AUTH")
if auth and auth ~= "" then wrk.headers["Proxy-Authorization"] = auth end
function delay() return $DELAY_MS end
LUA
half() { wrk -t2 -c"$HALF_CONNS" -d"$DURATION" --latency "$@" 2>&1; }
half_direct=$(TARGET_PATH=/ half -s "$work/half.lua" "http://127.0.0.1:$UP" | parse)
half_gate=$(TARGET_PATH="http://127.0.0.1:$UP/" PROXY_AUTH="Bearer $GRANT" half -s "$work/half.lua" "http://127.0.0.1:$PX" | parse)
echo
echo "half load ($HALF_CONNS connections, each pausing ${DELAY_MS} ms between requests):"
printf '  %-10s %10s req/s  p50 %8s  p99 %8s\n' direct $half_direct gatehouse $half_gate
python3 - "$half_direct" "$half_gate" <<'PY'
import sys
def ms(v):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if v.endswith(unit) and v[: -len(unit)].replace(".", "").isdigit():
            return float(v[: -len(unit)]) * f
d, g = (a.split() for a in sys.argv[1:])
print(f"  added p99 through gatehouse: {ms(g[2]) - ms(d[2]):.2f} ms")
PY

# CONNECT bulk transfer: a 512 MiB body, plain HTTP inside the tunnel (so the
# tunnel's own work is measured, not TLS). Five interleaved rounds of one
# download each; the report is the median of each and of the per-round ratios.
: >"$work/bulk"
speed() { curl -s -o /dev/null -w '%{speed_download}' "$@"; }
# One untimed read first: the file is sparse, and its first reader would pay
# for filling the page cache, which is no proxy's doing.
speed "http://127.0.0.1:$UP/big" >/dev/null
for round in 1 2 3 4 5; do
  echo "$(speed "http://127.0.0.1:$UP/big") \
$(speed -p -x "http://grant:$GRANT@127.0.0.1:$PX" "http://127.0.0.1:$UP/big") \
$(speed -p -x "http://127.0.0.1:$SQ" "http://127.0.0.1:$UP/big")" >>"$work/bulk"
done
echo
python3 - "$work/bulk" <<'PY'
import statistics, sys
rounds = [[float(v) for v in l.split()] for l in open(sys.argv[1]) if l.strip()]
print("CONNECT bulk transfer (512 MiB), median of 5 rounds:")
for i, name in enumerate(("direct", "gatehouse tunnel", "squid tunnel")):
    print(f"  {name:<18} {statistics.median(r[i] for r in rounds) / 2**20:8.0f} MiB/s   rounds: "
          + ", ".join(f"{r[i] / 2**20:.0f}" for r in rounds))
g = statistics.median(r[1] / r[0] for r in rounds)
s = statistics.median(r[2] / r[0] for r in rounds)
print(f"  median ratios: gatehouse / direct {g:.2f}   squid / direct {s:.2f}")
PY
