#!/usr/bin/env bash
# Files through grants on the local filesystem: a 1 GiB upload into a run's
# output session and its download by another run, through one gatehouse
# (release build, content scanning by sniffing, no clamd), beside a plain
# `cp` of the same file on the same disk, in one run. Reports throughput
# ratios and the gateway's peak memory (VmHWM) against the file's size.
#
#   bash bench/files.sh              # 1 GiB, 3 rounds
#   SIZE_MIB=256 ROUNDS=5 bash bench/files.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB=${SIZE_MIB:-1024}
ROUNDS=${ROUNDS:-3}
source bench/lib.sh
cargo build --release --locked --bin gatehouse -q

# Text, so the sniffer accepts it whole (an upload is content-scanned).
# (`yes` ends on SIGPIPE when `head` has enough: not a failure.)
(set +o pipefail; yes 'the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnop' | head -c "$((SIZE_MIB << 20))" >"$work/big.txt")
bytes=$(stat -c %s "$work/big.txt")
export GATEHOUSE_CONTENT_MAX_BYTES=$bytes
CONNECT_PORTS=443  # no upstream here
start_gatehouse cur ./target/release/gatehouse
pid=${pids[-1]}
grep VmHWM "/proc/$pid/status" | awk '{print "gateway peak memory before:", $2, "kB"}'

run_grant() {
  api cur POST /v1/runs "{\"tenant_id\":\"bench\",\"user_id\":\"u1\",\"body\":{\"code\":\"x\"},$1,\"budgets\":{\"max_upload_bytes\":$((bytes * (ROUNDS + 1))),\"max_output_files\":10}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["grant"])'
}
: >"$work/rows"
for round in $(seq "$ROUNDS"); do
  sync
  t_cp=$( { TIMEFORMAT=%R; time cp "$work/big.txt" "$work/copy.txt"; } 2>&1 )
  rm -f "$work/copy.txt"
  writer=$(run_grant '"output_session_id":"out-'"$round"'"')
  t_up=$(curl -s -o /dev/null -w '%{time_total}' -X PUT -T "$work/big.txt" -H "Authorization: Bearer $writer" \
    "http://127.0.0.1:$cur_API/v1/sessions/out-$round/files/big.txt")
  reader=$(run_grant '"read_sessions":["out-'"$round"'"],"output_session_id":"none"')
  t_down=$(curl -s -o "$work/down.txt" -w '%{time_total}' -H "Authorization: Bearer $reader" \
    "http://127.0.0.1:$cur_API/v1/sessions/out-$round/files/big.txt")
  cmp -s "$work/big.txt" "$work/down.txt" || { echo "round $round: the download differs"; exit 1; }
  rm -f "$work/down.txt"
  echo "$t_cp $t_up $t_down" >>"$work/rows"
done
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
python3 - "$work/rows" "$bytes" "$hwm" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
size, hwm = int(sys.argv[2]), int(sys.argv[3])
mib = size / (1 << 20)
cp, up, down = (statistics.median(c) for c in zip(*rows))
print(f"file: {mib:.0f} MiB, rounds: {len(rows)} (seconds: cp / upload / download per round: {rows})")
print(f"cp                   {mib / cp:8.0f} MiB/s")
print(f"upload (PUT)         {mib / up:8.0f} MiB/s   upload / cp:   {cp / up:.2f}  (target >= 0.5)")
print(f"download (GET)       {mib / down:8.0f} MiB/s   download / cp: {cp / down:.2f}  (target >= 0.5)")
print(f"gateway peak memory (VmHWM): {hwm / 1024:.0f} MiB for a {mib:.0f} MiB file")
PY
