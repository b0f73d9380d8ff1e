#!/usr/bin/env bash
# What two workers could reach with a hand-off that cost nothing, beside
# what `xdprobe pcap --workers 2` reaches, both against tcpdump, in the same
# alternating rounds.
#
# The file is split once, ahead of the rounds, into two halves by a
# symmetric address hash (the parity of the XOR of the addresses' last
# bytes, IPv4 and IPv6; every other frame goes to the second half), so each
# flow's packets are all in one half, as `--workers` steers them. The
# ceiling run is two independent `xdprobe pcap HALF --workers 1` processes
# started together, one per half, timed until both end: the per-packet work
# of two workers with no reader thread, no rings and no steering, sharing
# the machine's last-level cache and memory as two workers do. A `--workers
# 2` run slower than the ceiling pays that much for its hand-off; a ceiling
# slower than tcpdump says the per-packet work itself is too costly for
# the cores there are, whatever the hand-off.
#
# With --floors, two more runs per round say how far the goal is from what
# the cores allow at all: the ceiling with NPM off (`--no-npm`: the flow
# table alone, no metric state), and tcpdump itself on the two halves at
# once (how much a copier gains from the second core here: were the VM's
# two vCPUs fully independent, half the time of one tcpdump).
#
# usage: benches/ceiling.sh [--rounds N] [--no-build] [--bin BIN] [--floors]
#                           [FILE]
#   FILE       capture (default $XDPROBE_BENCH_PCAP or /tmp/bench.pcap;
#              generated with mkbench.py --flows 400000 --concurrent 50000
#              --seed 7 when missing)
#   --rounds   alternating rounds (default 7); each runs tcpdump, --workers
#              2, the ceiling and --workers 1 once, in that order
#   --bin BIN  an xdprobe binary to time instead of building one
#   --floors   also time the ceiling with --no-npm and two tcpdumps on the
#              halves (appended to each round, in that order)
#   env        MKBENCH (path of mkbench.py), CARGO_TARGET_DIR
#
# Prints every round's wall times and, per command, the median wall time
# and the median of the per-round ratios tcpdump / command (above 1: faster
# than tcpdump).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MKBENCH=${MKBENCH:-/work/shared/tools/mkbench.py}
ROUNDS=7
BUILD=1
BIN=
FLOORS=0
FILE=${XDPROBE_BENCH_PCAP:-/tmp/bench.pcap}
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --bin) BIN=$2; BUILD=0; shift 2 ;;
    --floors) FLOORS=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) FILE=$1; shift ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "--rounds wants a positive number" >&2; exit 2 ;; esac
for tool in tcpdump python3; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 2; }
done

if [ ! -f "$FILE" ]; then
  [ -f "$MKBENCH" ] || { echo "no $FILE and no mkbench.py at $MKBENCH" >&2; exit 2; }
  python3 "$MKBENCH" "$FILE.part" --flows 400000 --concurrent 50000 --seed 7
  mv "$FILE.part" "$FILE"
fi
if [ "$BUILD" = 1 ]; then
  (cd "$ROOT" && cargo build -q --profile release-lto --bin xdprobe)
fi
XD=${BIN:-$TARGET/release-lto/xdprobe}
[ -x "$XD" ] || { echo "no xdprobe binary at $XD" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# tcpdump drops its privileges to its own user when run as root: the halves
# go into a directory it may write.
chmod 0777 "$WORK"
EVEN='(ip and ((ip[15] ^ ip[19]) & 1) = 0) or (ip6 and ((ip6[23] ^ ip6[39]) & 1) = 0)'
tcpdump -r "$FILE" -w "$WORK/half0.pcap" "$EVEN" 2>/dev/null
tcpdump -r "$FILE" -w "$WORK/half1.pcap" "not ($EVEN)" 2>/dev/null

wall() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
# The two halves at once, each through "$@" HALF; timed until both end.
both() {
  "$@" "$WORK/half0.pcap" >/dev/null 2>&1 &
  local other=$!
  "$@" "$WORK/half1.pcap" >/dev/null 2>&1
  wait "$other"
}
xd1() { "$XD" pcap "$1" --format none --workers 1; }
xd1_no_npm() { "$XD" pcap "$1" --format none --workers 1 --no-npm; }
td() { tcpdump -r "$1" -w /dev/null; }
ceiling() { both xd1; }

if [ "$FLOORS" = 1 ]; then
  echo "round  tcpdump  workers2  ceiling  workers1  ceil-nonpm  2xtcpdump   (ms)"
else
  echo "round  tcpdump  workers2  ceiling  workers1   (ms)"
fi
: >"$WORK/rounds"
for r in $(seq "$ROUNDS"); do
  a=$(wall tcpdump -r "$FILE" -w /dev/null)
  b=$(wall "$XD" pcap "$FILE" --format none --workers 2)
  c=$(wall ceiling)
  d=$(wall "$XD" pcap "$FILE" --format none --workers 1)
  if [ "$FLOORS" = 1 ]; then
    e=$(wall both xd1_no_npm)
    f=$(wall both td)
    printf '%5d  %7d  %8d  %7d  %8d  %10d  %9d\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f"
    echo "$a $b $c $d $e $f" >>"$WORK/rounds"
  else
    printf '%5d  %7d  %8d  %7d  %8d\n' "$r" "$a" "$b" "$c" "$d"
    echo "$a $b $c $d" >>"$WORK/rounds"
  fi
done
python3 - "$WORK/rounds" <<'EOF'
import statistics, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
names = ["tcpdump -r FILE -w /dev/null", "xdprobe pcap --workers 2",
         "ceiling: 2 x --workers 1 on halves", "xdprobe pcap --workers 1",
         "ceiling, --no-npm", "2 x tcpdump on halves"][:len(rows[0])]
print()
print(f"{'command':36} {'median ms':>9} {'tcpdump / this':>15}")
for i, n in enumerate(names):
    med = statistics.median(r[i] for r in rows)
    ratio = statistics.median(r[0] / r[i] for r in rows if r[i] > 0)
    print(f"{n:36} {med:9.0f} {ratio:15.3f}")
hand_off = statistics.median(r[1] / r[2] for r in rows if r[2] > 0)
print(f"\n--workers 2 / ceiling (what the hand-off costs): {hand_off:.3f}")
EOF
