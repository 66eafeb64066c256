#!/usr/bin/env bash
# MCP at the door: a tool call read as MCP (the body judged, the call paid
# as a tool_call in the ledger, the answer narrowed) beside the same call
# through the same proxy without MCP reading, in one run: the same real MCP
# server (the official TypeScript SDK's, answering JSON), the same client
# (wrk posting one tools/call), the same gatehouse node, two tenants: one
# declares the server, the other does not.
#
#   bash bench/mcp.sh               # 3 rounds of 10 s each, interleaved
#   ROUNDS=5 DURATION=20s bash bench/mcp.sh
#
# Needs wrk and nginx-light (installed if missing), Node.js and
# `npm ci --prefix crates/test-support/mcp`, and builds gatehouse in release
# mode.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-8}
ROUNDS=${ROUNDS:-3}

source bench/lib.sh
cargo build --release --locked --bin gatehouse -q
[ -d crates/test-support/mcp/node_modules ] || npm ci --prefix crates/test-support/mcp --no-audit --no-fund >/dev/null
(cd crates/test-support/mcp && exec node server.mjs --json) >"$work/mcp.out" & pids+=($!)
for _ in $(seq 1 50); do grep -q listening "$work/mcp.out" 2>/dev/null && break; sleep 0.1; done
MCP=$(awk '{print $3}' "$work/mcp.out")
UP=$MCP
start_gatehouse cur ./target/release/gatehouse

# Both tenants may reach the server; only "mcp" declares it.
for tenant in mcp plain; do
  api cur PUT "/v1/tenants/$tenant/egress-policy" '{"mode":"allowlist","allow":["127.0.0.1"]}' >/dev/null
done
api cur PUT /v1/tenants/mcp/mcp-servers \
  "{\"servers\":[{\"name\":\"bench\",\"url\":\"http://127.0.0.1:$MCP/mcp\",\"tools\":{\"allow\":[\"echo\"]}}]}" >/dev/null
grant_for() {
  api cur POST /v1/grants "{\"exec_id\":\"bench-$1\",\"tenant_id\":\"$1\",\"user_id\":\"bench\",\"max_requests\":9000000000000,\"max_tool_calls\":9000000000000,\"max_egress_bytes\":9000000000000000}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}
MCP_GRANT=$(grant_for mcp)
PLAIN_GRANT=$(grant_for plain)
sleep 1  # the node's policy replica takes the declaration within a poll

body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
call() {
  curl -s -x "http://grant:$1@127.0.0.1:$cur_PX" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -d "$2" "http://127.0.0.1:$MCP/mcp"
}
# Both ways answer the call; the declared way refuses a denied tool.
for g in "$MCP_GRANT" "$PLAIN_GRANT"; do
  out=$(call "$g" "$body")
  grep -q '"result"' <<<"$out" || { echo "the call failed: $out"; exit 1; }
done
call "$MCP_GRANT" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}}' | grep -q mcp_tool_denied ||
  { echo "the declared server's rules are not applied"; exit 1; }

cat > "$work/call.lua" <<LUA
wrk.method = "POST"
wrk.path = "http://127.0.0.1:$MCP/mcp"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Proxy-Authorization"] = os.getenv("PROXY_AUTH")
LUA
run() {
  PROXY_AUTH="Bearer $1" wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$work/call.lua" "http://127.0.0.1:$cur_PX" >"$work/wrk.out" 2>&1
  if grep -q "Non-2xx" "$work/wrk.out"; then echo "non-2xx answers:"; cat "$work/wrk.out"; exit 1; fi
  parse <"$work/wrk.out"
}

: >"$work/results"
for round in $(seq "$ROUNDS"); do
  echo "plain $(run "$PLAIN_GRANT")" >>"$work/results"
  echo "mcp $(run "$MCP_GRANT")" >>"$work/results"
done
calls=$(curl -s "http://127.0.0.1:$cur_API/metrics" | awk '/^gatehouse_mcp_tool_calls_total\{outcome="allowed"\}/ {print $2}')

python3 - "$work/results" "$calls" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for name, rps, p50, p99 in rows:
    by.setdefault(name, []).append((float(rps), p50, p99))
labels = {"plain": "no MCP reading", "mcp": "read as MCP"}
print(f"{'one tools/call':<16} {'calls/s (median)':>17} {'p50':>9} {'p99':>9}   all rounds")
for name in ("plain", "mcp"):
    runs = sorted(by[name])
    rps, p50, p99 = runs[len(runs) // 2]
    print(f"{labels[name]:<16} {rps:>17.0f} {p50:>9} {p99:>9}   {', '.join(f'{r[0]:.0f}' for r in by[name])}")
ratio = statistics.median(m[0] / p[0] for p, m in zip(by["plain"], by["mcp"]))
print(f"read as MCP / no MCP reading: {ratio:.2f}  (target >= 0.80)")
print(f"tool calls the door paid and let through: {sys.argv[2]}")
PY
