#!/usr/bin/env bash
# Floods, whole process: xdprobe pcap (release-lto, --format none --stats)
# on a SYN flood, a first-fragment flood and a non-first-fragment flood
# against ordinary traffic, at N and 2N packets each, read from stdin.
# Reports per-packet time (median of RUNS) as a ratio to ordinary, and max
# RSS at N and 2N: once the tables are full, twice the packets must not
# need more memory.
#
# usage: benches/flood.sh [--runs N] [--packets N] [--no-build]
#   env PROFILE (cargo profile, default release-lto), CARGO_TARGET_DIR
# Captures are generated into a temp dir (examples/flood_pcap.rs) and
# removed at exit; figures go to stdout (BENCHMARKS.md quotes them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
RUNS=3
N=2000000
BUILD=1
PROFILE=${PROFILE:-release-lto}
while [ $# -gt 0 ]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --packets) N=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ -x /usr/bin/time ] || { echo "flood.sh: /usr/bin/time (GNU time) not found" >&2; exit 1; }
if ((BUILD)); then
    (cd "$ROOT" && cargo build --quiet --profile "$PROFILE" --bin xdprobe &&
        cargo build --quiet --profile "$PROFILE" -p xdprobe-dataplane --example flood_pcap)
fi
XDPROBE=$TARGET/$PROFILE/xdprobe
GEN=$TARGET/$PROFILE/examples/flood_pcap
WORK=$(mktemp -d /tmp/xdprobe-flood.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

kinds=(ordinary syn_flood first_fragment_flood later_fragment_flood)
declare -A ns rss
runs=()
for k in "${kinds[@]}"; do
    for n in "$N" "$((2 * N))"; do
        "$GEN" "$k" "$n" "$WORK/$k-$n.pcap"
        runs+=("$k,$n")
    done
done
declare -A times
# Round-robin (one run of every capture per round), so load from other
# processes hits all alike; captures are read from the page cache.
for ((r = 0; r < RUNS; r++)); do
    for kn in "${runs[@]}"; do
        k=${kn%,*} n=${kn#*,}
        pcap=$WORK/$k-$n.pcap
        cat "$pcap" >/dev/null
        # From stdin: the stream reader's buffer is bounded, so max RSS is
        # the probe's own memory (a mapped file would count its pages).
        /usr/bin/time -f '%e %M' -o "$WORK/time" \
            "$XDPROBE" pcap - --format none --stats <"$pcap" 2>"$WORK/stats-$k-$n"
        read -r secs kib <"$WORK/time"
        times[$kn]="${times[$kn]:-} $secs"
        rss[$kn]=$kib
    done
done
for kn in "${runs[@]}"; do
    k=${kn%,*} n=${kn#*,}
    med=$(printf '%s\n' ${times[$kn]} | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")
    ns[$kn]=$(python3 -c "print($med * 1e9 / $n)")
    echo "== $k, $n packets: median ${med}s, max RSS ${rss[$kn]} KiB" >&2
    sed 's/^/   /' "$WORK/stats-$k-$n" >&2
done
printf '| stream | ns/packet (%s packets) | × ordinary | max RSS, %s packets | max RSS, %s packets |\n' "$((2 * N))" "$N" "$((2 * N))"
printf '|---|---|---|---|---|\n'
base=${ns[ordinary,$((2 * N))]}
for k in "${kinds[@]}"; do
    python3 - "$k" "${ns[$k,$((2 * N))]}" "$base" "${rss[$k,$N]}" "${rss[$k,$((2 * N))]}" <<'PY'
import sys
k, t, base, r1, r2 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print(f"| {k} | {t:.0f} | {t / base:.2f} | {r1 / 1024:.0f} MiB | {r2 / 1024:.0f} MiB |")
PY
done
