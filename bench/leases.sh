#!/usr/bin/env bash
# What a credential lease costs a run's requests, all in one run on this
# machine, through one build and one run:
#
#   1. injected: plain HTTP through the proxy to the host the run holds a
#      lease for (the credential opened, put in, the answer scrubbed), beside
#      the same request to a host it holds no lease for (wrk, 50 connections);
#   2. intercepted: HTTPS through CONNECT to the lease host (gatehouse
#      terminates TLS under its interception CA, keep-alive on both sides),
#      beside plain HTTP proxied to the same host (one client connection,
#      requests in sequence, curl reusing it);
#   3. the first request to a new host, whose leaf certificate is minted,
#      beside later first requests (the leaf cached).
#
#   bash bench/leases.sh            # 3 rounds of 10 s, 2000 sequential requests
#
# Needs wrk, nginx-light (with its ssl module) and openssl; builds the binary
# in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
ROUNDS=${ROUNDS:-3}
SEQUENTIAL=${SEQUENTIAL:-2000}

source bench/lib.sh
cargo build --release --locked --bin gatehouse -q

# The upstream: nginx on two loopback addresses, plain and TLS (a certificate
# for 127.0.0.1 under a CA of the benchmark's own, which gatehouse trusts).
UP=$(free_port); TLSUP=$(free_port)
mkdir -p "$work/www" "$work/nginx"
printf 'hello from upstream\n' > "$work/www/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
  -keyout "$work/up.key" -out "$work/up.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2\n' > "$work/san.ext"
openssl x509 -req -in "$work/up.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/san.ext" -out "$work/up.pem" 2>/dev/null
cat > "$work/nginx.conf" <<CONF
daemon off; worker_processes 1; pid $work/nginx.pid; error_log $work/nginx/error.log;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $work/nginx; proxy_temp_path $work/nginx; keepalive_requests 100000;
  server { listen 127.0.0.1:$UP; listen 127.0.0.2:$UP; root $work/www; }
  server { listen 127.0.0.1:$TLSUP ssl; listen 127.0.0.2:$TLSUP ssl; root $work/www;
    ssl_certificate $work/up.pem; ssl_certificate_key $work/up.key; } }
CONF
nginx -c "$work/nginx.conf" & pids+=($!)

export GATEHOUSE_EGRESS_EXTRA_CA_FILE="$work/ca.pem"
CONNECT_PORTS="443,$TLSUP" start_gatehouse cur ./target/release/gatehouse

run=$(api cur POST /v1/runs '{"tenant_id":"bench","user_id":"bench","body":{"code":"bench"},"ttl_secs":3600,
  "budgets":{"max_requests":9000000000000,"max_egress_bytes":9000000000000000}}')
read -r RUN GRANT < <(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["run_id"], r["grant"])' <<<"$run")
python3 -c 'import json,sys; print(json.load(sys.stdin)["ca_certificate_pem"], end="")' <<<"$run" > "$work/gatehouse-ca.pem"
cred=$(api cur POST /v1/tenants/bench/credentials '{"name":"bench","purpose":"runtime_secret","host":"127.0.0.1",
  "inject":{"header":"Authorization","format":"Bearer {secret}"},"allow_plain_http":true,"secret":"bench-secret-0123456789abcdef"}')
CRED=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["credential_id"])' <<<"$cred")
api cur POST "/v1/runs/$RUN/leases" "{\"credential_id\":\"$CRED\",\"purpose\":\"runtime_secret\",\"host\":\"127.0.0.1\"}" >/dev/null
# The lease lives two minutes, renewed by the run's heartbeat.
( while sleep 20; do api cur POST "/v1/runs/$RUN/heartbeat" >/dev/null || true; done ) & pids+=($!)
PROXY="http://grant:$GRANT@127.0.0.1:$cur_PX"

# Sanity: the lease host gets the credential, the other host does not, and
# HTTPS to the lease host is answered under gatehouse's CA.
curl -sf -o /dev/null -x "$PROXY" "http://127.0.0.1:$UP/" || { echo "injected request failed"; cat "$work/cur.log"; exit 1; }
curl -sf -o /dev/null -x "$PROXY" "http://127.0.0.2:$UP/" || { echo "plain request failed"; exit 1; }
curl -sf -o /dev/null -x "$PROXY" --cacert "$work/gatehouse-ca.pem" "https://127.0.0.1:$TLSUP/" ||
  { echo "intercepted request failed"; cat "$work/cur.log"; exit 1; }

cat > "$work/proxy.lua" <<LUA
wrk.path = os.getenv("TARGET")
wrk.headers["Proxy-Authorization"] = "Bearer " .. os.getenv("GRANT")
LUA
load() { TARGET=$1 GRANT=$GRANT wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$work/proxy.lua" "http://127.0.0.1:$cur_PX" 2>&1 | parse; }
# N requests on one connection: curl reuses it for every URL of its config.
sequential() {
  local config="$work/urls-$RANDOM" start end
  for _ in $(seq "$SEQUENTIAL"); do printf 'url = "%s"\noutput = "/dev/null"\n' "$1"; done > "$config"
  start=$(date +%s.%N)
  curl -sf -x "$PROXY" "${@:2}" -K "$config"
  end=$(date +%s.%N)
  python3 -c "print($SEQUENTIAL / ($end - $start))"
}

: >"$work/results"
for round in $(seq "$ROUNDS"); do
  echo "injected $(load "http://127.0.0.1:$UP/")" >>"$work/results"
  echo "plain $(load "http://127.0.0.2:$UP/")" >>"$work/results"
  echo "https $(sequential "https://127.0.0.1:$TLSUP/" --cacert "$work/gatehouse-ca.pem") - -" >>"$work/results"
  echo "http $(sequential "http://127.0.0.1:$UP/") - -" >>"$work/results"
done

# First requests on new tunnels: to a new host (127.0.0.2 leased now, its
# leaf minted) and again (the leaf cached); each a fresh curl, fresh TLS.
api cur POST /v1/tenants/bench/credentials '{"name":"second","purpose":"runtime_secret","host":"127.0.0.2",
  "inject":{"header":"Authorization","format":"Bearer {secret}"},"secret":"bench-secret-fedcba9876543210"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["credential_id"])' > "$work/cred2"
api cur POST "/v1/runs/$RUN/leases" "{\"credential_id\":\"$(cat "$work/cred2")\",\"purpose\":\"runtime_secret\",\"host\":\"127.0.0.2\"}" >/dev/null
first() { curl -sf -o /dev/null -w '%{time_total}' -x "$PROXY" --cacert "$work/gatehouse-ca.pem" "https://127.0.0.2:$TLSUP/"; }
minted=$(first)
: >"$work/cached"
for _ in $(seq 20); do first >>"$work/cached"; echo >>"$work/cached"; done

python3 - "$work/results" "$minted" "$work/cached" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    name, rps, p50, p99 = line.split()
    by.setdefault(name, []).append((float(rps), p50, p99))
labels = {"injected": "injected (lease host)", "plain": "no lease (other host)",
          "https": "HTTPS, intercepted", "http": "plain HTTP, same host"}
print(f"{'through the proxy, one run':<28} {'requests/s (median)':>20} {'p50':>9} {'p99':>9}   all rounds")
for name in ("injected", "plain", "https", "http"):
    runs = sorted(by[name])
    rps, p50, p99 = runs[len(runs) // 2]
    print(f"{labels[name]:<28} {rps:>20.0f} {p50:>9} {p99:>9}   {', '.join(f'{r[0]:.0f}' for r in by[name])}")
ratio = lambda a, b: statistics.median(x[0] / y[0] for x, y in zip(by[a], by[b]))
print(f"injected / no lease (wrk, 50 connections):        {ratio('injected', 'plain'):.2f}  (target >= 0.9)")
print(f"intercepted HTTPS / plain HTTP (one connection):  {ratio('https', 'http'):.2f}  (target >= 0.4)")
cached = [float(l) for l in open(sys.argv[3]) if l.strip()]
print(f"first request to a new host (leaf minted), new tunnel: {float(sys.argv[2]) * 1000:.1f} ms;"
      f" later new tunnels (leaf cached): median {statistics.median(cached) * 1000:.1f} ms")
PY
