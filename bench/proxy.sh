#!/usr/bin/env bash
# Forward-proxy load benchmark, all in one run on this machine:
#   direct to a local nginx, through the gatehouse proxy, and through Squid
#   (allow-all ACL, no cache, no access log), with wrk. Prints requests/s,
#   p50/p99 latency and the ratios. Needs: wrk, nginx-light, squid (Debian
#   packages; installed here if missing) and a release build of gatehouse.
#
#   bash bench/proxy.sh            # 10 s per run, 50 connections, 2 threads
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v squid >/dev/null || need+=(squid)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release --locked --bin gatehouse -q

work=$(mktemp -d)
# nginx workers and squid drop root: let them read and write their files.
chmod 755 "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Upstream: nginx serving a small static page.
UP=$(free_port)
mkdir -p "$work/www" "$work/nginx"
printf 'hello from upstream\n' > "$work/www/index.html"
cat > "$work/nginx.conf" <<CONF
daemon off; worker_processes 1; pid $work/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $work/nginx; proxy_temp_path $work/nginx;
  server { listen 127.0.0.1:$UP; root $work/www; } }
CONF
nginx -c "$work/nginx.conf" & pids+=($!)

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
API=$(free_port); PX=$(free_port)
./target/release/gatehouse keygen --out "$work/keys" >/dev/null
GATEHOUSE_LISTEN=127.0.0.1:$API GATEHOUSE_PROXY_LISTEN=127.0.0.1:$PX GATEHOUSE_DATA_DIR="$work/data" \
  GATEHOUSE_EGRESS_ALLOW_RANGES=127.0.0.0/8 GATEHOUSE_LOG=warn \
  CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY_FILE="$work/keys/manifest-private.pem" \
  CODEAPI_EGRESS_GRANT_SECRET_FILE="$work/keys/grant-secret" \
  CODEAPI_INTERNAL_SERVICE_TOKEN_FILE="$work/keys/service-token" \
  ./target/release/gatehouse serve >/dev/null 2>"$work/gatehouse.log" & pids+=($!)
sleep 2
TOKEN=$(cat "$work/keys/service-token")
GRANT=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -d '{"exec_id":"bench","tenant_id":"bench","user_id":"bench","max_requests":9000000000000}' \
  "http://127.0.0.1:$API/v1/grants" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -sf -o /dev/null -x "http://grant:$GRANT@127.0.0.1:$PX" "http://127.0.0.1:$UP/" || { echo "proxy check failed"; cat "$work/gatehouse.log"; exit 1; }
curl -sf -o /dev/null -x "http://127.0.0.1:$SQ" "http://127.0.0.1:$UP/" || { echo "squid check failed"; exit 1; }

# wrk speaks to a proxy when the request line carries the absolute URL.
cat > "$work/proxy.lua" <<LUA
wrk.path = "http://127.0.0.1:$UP/"
local auth = os.getenv("PROXY_AUTH")
if auth and auth ~= "" then wrk.headers["Proxy-Authorization"] = auth end
LUA
run() { wrk -t2 -c"$CONNS" -d"$DURATION" --latency "$@" 2>&1; }
parse() { awk '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print rps, p50, p99}'; }

direct=$(run "http://127.0.0.1:$UP/" | parse)
gate=$(PROXY_AUTH="Bearer $GRANT" run -s "$work/proxy.lua" "http://127.0.0.1:$PX" | parse)
squid=$(PROXY_AUTH="" run -s "$work/proxy.lua" "http://127.0.0.1:$SQ" | parse)

printf '%-22s %12s %10s %10s\n' target 'requests/s' p50 p99
printf '%-22s %12s %10s %10s\n' direct $direct
printf '%-22s %12s %10s %10s\n' 'gatehouse proxy' $gate
printf '%-22s %12s %10s %10s\n' squid $squid
python3 - "$direct" "$gate" "$squid" <<PY
import sys
d, g, s = (float(a.split()[0]) for a in sys.argv[1:])
print(f"gatehouse / direct: {g/d:.2f}   squid / direct: {s/d:.2f}   gatehouse / squid: {g/s:.2f}")
PY
