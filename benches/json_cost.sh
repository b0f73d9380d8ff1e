#!/usr/bin/env bash
# What JSON lines cost a whole `xdprobe pcap` run: `--format json
# >/dev/null` against `--format none` on the same file, alternating runs
# (one of each per round, so load from other processes hits both alike),
# medians of wall time and of CPU time (user + sys, from /usr/bin/time;
# the steadier figure on a shared machine).
#
# usage: benches/json_cost.sh [FILE]
#   FILE  capture (default $XDPROBE_BENCH_PCAP or /tmp/bench.pcap; generated
#         with mkbench.py --flows 400000 --concurrent 50000 --seed 7 if missing)
#   env   RUNS (default 7), BIN (default target/release/xdprobe, built if
#         missing), MKBENCH (path of mkbench.py)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release/xdprobe}
RUNS=${RUNS:-7}
FILE=${1:-${XDPROBE_BENCH_PCAP:-/tmp/bench.pcap}}
MKBENCH=${MKBENCH:-/work/shared/tools/mkbench.py}

[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -p xdprobe)
if [ ! -f "$FILE" ]; then
    python3 "$MKBENCH" "$FILE.part" --flows 400000 --concurrent 50000 --seed 7
    mv "$FILE.part" "$FILE"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$RUNS"); do
    for fmt in none json; do
        /usr/bin/time -f "%e %U %S" -a -o "$tmp/$fmt" \
            "$BIN" pcap "$FILE" --format "$fmt" >/dev/null
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for fmt in none json; do
    wall=$(awk '{ print $1 }' "$tmp/$fmt" | median)
    cpu=$(awk '{ print $2 + $3 }' "$tmp/$fmt" | median)
    echo "$fmt $wall $cpu" >>"$tmp/medians"
    printf '%-5s wall median %6.3f s   cpu median %6.3f s   (runs: %s)\n' "$fmt" "$wall" "$cpu" \
        "$(awk '{ printf "%s/%.2f ", $1, $2 + $3 }' "$tmp/$fmt")"
done
awk '{ w[$1] = $2; c[$1] = $3 }
     END { printf "JSON costs %+.1f %% wall, %+.1f %% CPU over --format none\n",
           (w["json"] / w["none"] - 1) * 100, (c["json"] / c["none"] - 1) * 100 }' "$tmp/medians"
