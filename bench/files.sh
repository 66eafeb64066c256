#!/usr/bin/env bash
# Files through grants on the local filesystem: a 1 GiB upload into a run's
# output session and its download by another run, through one gatehouse
# (release build, content scanning by sniffing; with CLAMD=1 also by clamd), beside a plain
# `cp` of the same file on the same disk, in one run. Reports throughput
# ratios and the gateway's peak memory (VmHWM) against the file's size.
#
# Like for like: gatehouse fsyncs an object before recording it, so the
# upload is compared with `cp` followed by `sync` of the copy (both end with
# the bytes on disk); a download is written by curl without fsync, so it is
# compared with a plain `cp` of the stored object. Every step starts after a
# `sync`, so no step pays for an earlier one's dirty pages, and no file is
# deleted until the end (on this VM's disk, freeing a 1 GiB file and syncing
# makes the next large write several times slower for a while).
#
#   bash bench/files.sh              # 1 GiB, 3 rounds
#   SIZE_MIB=256 ROUNDS=5 bash bench/files.sh
#   BENCH_DIR=/dev/shm ROUNDS=2 bash bench/files.sh   # on a tmpfs: no disk at all
#   CLAMD=1 bash bench/files.sh      # uploads also scanned by a private clamd
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
if [ "${CLAMD:-0}" = 1 ]; then
  # A private clamd with a one-signature database (no download): it writes
  # each stream to its temporary directory and hashes it, as it would with
  # the full database for a hash signature. Limits raised to the file size.
  mkdir -p "$work/clamd/db"
  echo '44d88612fea8a8f36de82e1278abb02f:68:Eicar-Test-Signature' >"$work/clamd/db/bench.hdb"
  CLAMD_PORT=$(free_port)
  cat >"$work/clamd/clamd.conf" <<CONF
Foreground yes
TCPSocket $CLAMD_PORT
TCPAddr 127.0.0.1
DatabaseDirectory $work/clamd/db
TemporaryDirectory $work/clamd
PidFile $work/clamd/clamd.pid
Bytecode no
StreamMaxLength $((bytes + 1024))
MaxScanSize $((bytes + 1024))
MaxFileSize $((bytes + 1024))
CONF
  /usr/sbin/clamd --config-file="$work/clamd/clamd.conf" >"$work/clamd/log" 2>&1 & pids+=($!)
  for _ in $(seq 1 100); do (echo >"/dev/tcp/127.0.0.1/$CLAMD_PORT") 2>/dev/null && break; sleep 0.2; done
  export CLAMD_HOST=127.0.0.1 CLAMD_PORT GATEHOUSE_CLAMD_TIMEOUT_MS=60000
  echo "content scanning: sniffing and clamd ($(/usr/sbin/clamd --version))"
fi
start_gatehouse cur ./target/release/gatehouse
pid=${pids[-1]}
grep VmHWM "/proc/$pid/status" | awk '{print "gateway peak memory before:", $2, "kB"}'

run_grant() {
  api cur POST /v1/runs "{\"tenant_id\":\"bench\",\"user_id\":\"u1\",\"body\":{\"code\":\"x\"},$1,\"budgets\":{\"max_upload_bytes\":$((bytes * (ROUNDS + 1))),\"max_output_files\":10}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["grant"])'
}
: >"$work/rows"
seconds() { local TIMEFORMAT=%R; { time "$@" >/dev/null; } 2>&1; }
for round in $(seq "$ROUNDS"); do
  sync
  t_cp_sync=$(seconds bash -c "cp '$work/big.txt' '$work/synced-$round.txt' && sync '$work/synced-$round.txt'")
  sync
  writer=$(run_grant '"output_session_id":"out-'"$round"'"')
  t_up=$(curl -s -o "$work/put.json" -w '%{time_total}' -X PUT -T "$work/big.txt" -H "Authorization: Bearer $writer" \
    "http://127.0.0.1:$cur_API/v1/sessions/out-$round/files/big.txt")
  python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); print("round", sys.argv[2], "upload verdict:", a.get("verdict") or a)' "$work/put.json" "$round"
  object=$(find "$work/cur-data/objects" -type f -size "${SIZE_MIB}M" -newer "$work/rows" | head -n 1)
  cat "$object" >/dev/null  # both readers below find it in the page cache
  sync
  t_cp=$(seconds cp "$object" "$work/copy-$round.txt")
  sync
  reader=$(run_grant '"read_sessions":["out-'"$round"'"],"output_session_id":"none"')
  t_down=$(curl -s -o "$work/down-$round.txt" -w '%{time_total}' -H "Authorization: Bearer $reader" \
    "http://127.0.0.1:$cur_API/v1/sessions/out-$round/files/big.txt")
  cmp -s "$work/big.txt" "$work/down-$round.txt" || { echo "round $round: the download differs"; exit 1; }
  echo "$t_cp_sync $t_up $t_cp $t_down" >>"$work/rows"
done
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
python3 - "$work/rows" "$bytes" "$hwm" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
size, hwm = int(sys.argv[2]), int(sys.argv[3])
mib = size / (1 << 20)
cp_sync, up, cp, down = (statistics.median(c) for c in zip(*rows))
print(f"file: {mib:.0f} MiB, rounds: {len(rows)}")
print(f"  seconds per round (cp+sync, upload, cp, download): {rows}")
print(f"cp + sync            {mib / cp_sync:8.0f} MiB/s")
print(f"upload (PUT)         {mib / up:8.0f} MiB/s   upload / (cp + sync): {cp_sync / up:.2f}  (target >= 0.5)")
print(f"cp                   {mib / cp:8.0f} MiB/s")
print(f"download (GET)       {mib / down:8.0f} MiB/s   download / cp:        {cp / down:.2f}  (target >= 0.5)")
print(f"gateway peak memory (VmHWM): {hwm / 1024:.0f} MiB for a {mib:.0f} MiB file")
PY
