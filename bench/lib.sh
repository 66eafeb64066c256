# Shared by the load benchmarks (sourced): packages, a scratch directory
# cleaned up on exit, free ports, the nginx upstream, gatehouse nodes, grants,
# and reading wrk's report.

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || need+=(nginx-light)
command -v squid >/dev/null || need+=(squid)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d ${BENCH_DIR:+-p "$BENCH_DIR"})  # BENCH_DIR: another file system (a tmpfs)
# nginx workers and squid drop root: let them read and write their files.
chmod 755 "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Upstream: nginx serving a small static page (/) and a sparse 512 MiB file (/big).
start_upstream() {
  UP=$(free_port)
  mkdir -p "$work/www" "$work/nginx"
  printf 'hello from upstream\n' > "$work/www/index.html"
  truncate -s 512M "$work/www/big"
  cat > "$work/nginx.conf" <<CONF
daemon off; worker_processes 1; pid $work/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $work/nginx; proxy_temp_path $work/nginx;
  server { listen 127.0.0.1:$UP; root $work/www; } }
CONF
  nginx -c "$work/nginx.conf" & pids+=($!)
}

# start_gatehouse NAME BINARY: all roles on loopback with the upstream's range
# opened explicitly and the embedded store in its own data dir; sets
# NAME_API, NAME_PX and NAME_TOKEN.
start_gatehouse() {
  local name=$1 bin=$2 api px
  api=$(free_port); px=$(free_port)
  "$bin" keygen --out "$work/$name-keys" >/dev/null
  GATEHOUSE_LISTEN=127.0.0.1:$api GATEHOUSE_PROXY_LISTEN=127.0.0.1:$px GATEHOUSE_DATA_DIR="$work/$name-data" \
    GATEHOUSE_EGRESS_ALLOW_RANGES=127.0.0.0/8 GATEHOUSE_PROXY_CONNECT_PORTS="${CONNECT_PORTS:-80,443,$UP}" GATEHOUSE_LOG=warn \
    CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY_FILE="$work/$name-keys/manifest-private.pem" \
    CODEAPI_EGRESS_GRANT_SECRET_FILE="$work/$name-keys/grant-secret" \
    CODEAPI_INTERNAL_SERVICE_TOKEN_FILE="$work/$name-keys/service-token" \
    "$bin" serve >/dev/null 2>"$work/$name.log" & pids+=($!)
  printf -v "${name}_API" %s "$api"
  printf -v "${name}_PX" %s "$px"
  printf -v "${name}_TOKEN" %s "$(cat "$work/$name-keys/service-token")"
  for _ in $(seq 1 50); do curl -sf -o /dev/null "http://127.0.0.1:$api/healthz" && return; sleep 0.2; done
  echo "$name did not start"; cat "$work/$name.log"; exit 1
}

# api NAME METHOD PATH [BODY]: one call to a node's API with its token.
api() {
  local api_var="${1}_API" token_var="${1}_TOKEN"
  curl -sf -X "$2" -H "Authorization: Bearer ${!token_var}" -H 'content-type: application/json' \
    ${4:+-d "$4"} "http://127.0.0.1:${!api_var}$3"
}

# grant NAME TENANT: a grant with a practically unlimited request budget.
# The budgets are out of the way (egress bytes too, where the build knows
# them: a reference build from before max_egress_bytes refuses the field).
grant() {
  local claims="\"exec_id\":\"bench-$2\",\"tenant_id\":\"$2\",\"user_id\":\"bench\",\"max_requests\":9000000000000"
  { api "$1" POST /v1/grants "{$claims,\"max_egress_bytes\":9000000000000000}" 2>/dev/null ||
    api "$1" POST /v1/grants "{$claims}"; } |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}

parse() { awk '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print rps, p50, p99}'; }
