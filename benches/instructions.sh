#!/usr/bin/env bash
# Exact per-packet cost of `xdprobe pcap`, by stage, beside tcpdump's: user
# space instructions counted by valgrind's cachegrind on the first PACKETS
# packets of a capture. CPU time on a shared virtual machine spreads by
# ±10 % between runs of the same binary; instruction counts repeat to
# within 0.01 %, so they decide small changes, and CPU time (benches/
# compare.sh) says what they are worth.
#
# usage: benches/instructions.sh [--packets N] [--cache] [--flood] [--no-build]
#                                [--bin BIN] [FILE]
#   FILE       capture (default $XDPROBE_BENCH_PCAP or /tmp/bench.pcap;
#              generated with mkbench.py --flows 400000 --concurrent 50000
#              --seed 7 when missing)
#   --packets  how many packets from the start of FILE (default 1000000)
#   --cache    also simulate the caches (a 32 KiB L1d and a 2 MiB L2, as
#              on the machine the figures in BENCHMARKS.md come from) and
#              report L2 misses per packet. cachegrind models neither
#              software prefetch nor the hardware prefetcher, so these are
#              the lines the path touches that such a cache does not hold,
#              not stalls. About 3x slower. Misses are also given by stage:
#              flow + metrics are the flow state's lines (index, hot and
#              cold entries, side columns) per packet.
#   --flood    also count two synthetic captures (dataplane/examples/
#              flood_pcap.rs, written to target/bench-data/): "ordinary",
#              TCP data segments round-robin over 50,000 established
#              connections (all but the first 50,000 packets are an
#              established flow's ordinary segment), and "syn", PACKETS/5
#              SYNs each starting a new flow (a flow's first packet, the
#              table never full); NPM on, one worker
#   --args A   extra arguments for every xdprobe command (e.g. --no-l7)
#   --bin BIN  an xdprobe binary to count instead of building one (e.g.
#              from another commit, for a before/after figure); stages need
#              its line tables (profile `profiling`)
#   env        MKBENCH (path of mkbench.py), CARGO_TARGET_DIR
#
# Rows: tcpdump -r CUT -w /dev/null (-Z root: it keeps its privileges, so
# cachegrind can write its counts into the private temp dir); xdprobe pcap
# CUT --format none with NPM on and one worker, NPM off, and two workers
# (both threads' instructions: the split's own cost). Stages are the source
# files the instructions come from (inlined code counts where it was
# written): read = source/ (records, time order), parse = parse/, flow =
# flow/ with hashbrown and foldhash, metrics = metrics/, worker = worker.rs
# (the batch), split = capture/ (steering, rings), std =
# inlined core/std helpers, other = everything else (start-up, output).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MKBENCH=${MKBENCH:-/work/shared/tools/mkbench.py}
PACKETS=1000000
CACHE=0
FLOOD=0
BUILD=1
BIN=""
XARGS=()
FILE=${XDPROBE_BENCH_PCAP:-/tmp/bench.pcap}
while [ $# -gt 0 ]; do
    case $1 in
        --packets) PACKETS=$2; shift 2 ;;
        --cache) CACHE=1; shift ;;
        --flood) FLOOD=1; shift ;;
        --no-build) BUILD=0; shift ;;
        --bin) BIN=$2; BUILD=0; shift 2 ;;
        --args) read -r -a XARGS <<< "$2"; shift 2 ;;
        -h|--help) sed -n '2,44p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) FILE=$1; shift ;;
    esac
done
for t in valgrind cg_annotate tcpdump python3; do
    command -v "$t" >/dev/null || { echo "instructions.sh: $t not found" >&2; exit 1; }
done

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --profile profiling -p xdprobe --bin xdprobe)
fi
XDP=${BIN:-$TARGET/profiling/xdprobe}
[ -x "$XDP" ] || { echo "instructions.sh: $XDP missing (run without --no-build)" >&2; exit 1; }
if [ ! -f "$FILE" ]; then
    case $(realpath -m "$FILE") in
        /work/shared/*) echo "instructions.sh: refusing to write $FILE into shared/" >&2; exit 1 ;;
    esac
    python3 "$MKBENCH" "$FILE.part" --flows 400000 --concurrent 50000 --seed 7 >&2
    mv "$FILE.part" "$FILE"
fi

WORK=$(mktemp -d /tmp/xdprobe-instructions.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
CUT=$WORK/cut.pcap
tcpdump -Z root -r "$FILE" -c "$PACKETS" -w "$CUT" 2>/dev/null
# Packets in the cut, counted from its record headers (printing them with
# tcpdump took 5-15 minutes for a million packets on a loaded machine).
N=$(python3 - "$CUT" <<'PY'
import struct, sys
f = open(sys.argv[1], "rb")
e = "<" if f.read(24)[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
n = 0
while len(r := f.read(16)) == 16:
    f.seek(struct.unpack(e + "I", r[8:12])[0], 1)
    n += 1
print(n)
PY
)
[ "$N" -gt 0 ] || { echo "instructions.sh: no packets in $FILE" >&2; exit 1; }

SIM=(--cache-sim=no)
[ "$CACHE" = 1 ] && SIM=(--cache-sim=yes --D1=32768,8,64 --LL=2097152,16,64)
count() { # NAME CMD...
    local name=$1; shift
    valgrind --tool=cachegrind "${SIM[@]}" --cachegrind-out-file="$WORK/$name.cg" \
        "$@" >/dev/null 2>"$WORK/$name.log" || {
        echo "instructions.sh: $name failed:" >&2; tail -5 "$WORK/$name.log" >&2; exit 1; }
    cg_annotate --auto=no --show-percs=no "$WORK/$name.cg" >"$WORK/$name.txt" 2>/dev/null
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $N packets from $FILE; $("$XDP" --version 2>/dev/null || echo xdprobe)"
count tcpdump tcpdump -Z root -r "$CUT" -w /dev/null
count npm_on "$XDP" pcap "$CUT" --format none --workers 1 "${XARGS[@]}"
count npm_off "$XDP" pcap "$CUT" --format none --workers 1 --no-npm "${XARGS[@]}"
count workers2 "$XDP" pcap "$CUT" --format none --workers 2 "${XARGS[@]}"
if [ "$FLOOD" = 1 ]; then
    DATA=$TARGET/bench-data
    mkdir -p "$DATA"
    SYN_N=$((PACKETS / 5))
    for k in "ordinary $PACKETS" "syn_flood $SYN_N"; do
        set -- $k
        f=$DATA/flood-$1-$2.pcap
        [ -f "$f" ] || (cd "$ROOT" && cargo run --release --quiet -p xdprobe-dataplane \
            --example flood_pcap -- "$1" "$2" "$f.part" && mv "$f.part" "$f")
    done
    count ordinary "$XDP" pcap "$DATA/flood-ordinary-$PACKETS.pcap" --format none --workers 1 "${XARGS[@]}"
    count syn "$XDP" pcap "$DATA/flood-syn_flood-$SYN_N.pcap" --format none --workers 1 "${XARGS[@]}"
fi

python3 - "$WORK" "$N" "$CACHE" "$FLOOD" "$PACKETS" <<'EOF'
import re, sys
work, n, cache, flood = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
packets = int(sys.argv[5])
STAGES = ["read", "parse", "flow", "metrics", "worker", "split", "std", "other"]

def stage(path):
    for key, name in (("/src/source/", "read"), ("/src/parse/", "parse"),
                      ("/src/flow/", "flow"), ("hashbrown", "flow"), ("foldhash", "flow"),
                      ("/src/metrics/", "metrics"), ("/src/worker.rs", "worker"),
                      ("/capture/src/", "split"),
                      ("/rustc/", "std")):
        if key in path:
            return name
    return "other"

def load(name):
    total, l2, by, l2by = 0, 0, dict.fromkeys(STAGES, 0), dict.fromkeys(STAGES, 0)
    for line in open(f"{work}/{name}.txt"):
        m = re.match(r"^\s*([\d,]+)((?:\s+[\d,.]+)*)\s+(\S.*)$", line)
        if not m:
            continue
        nums = [int(x.replace(",", "")) for x in ([m[1]] + m[2].split())]
        if m[3].startswith("PROGRAM TOTALS"):
            total = nums[0]
            if cache and len(nums) >= 9:
                l2 = nums[5] + nums[8]
            continue
        if ":" in m[3] and not m[3].startswith("("):
            st = stage(m[3].split(":")[0])
            by[st] += nums[0]
            if cache and len(nums) >= 9:
                l2by[st] += nums[5] + nums[8]
    return total, l2, by, l2by

rows = [("tcpdump -r CUT -w /dev/null", "tcpdump", n),
        ("xdprobe, NPM on, 1 worker", "npm_on", n),
        ("xdprobe, NPM off, 1 worker", "npm_off", n),
        ("xdprobe, NPM on, 2 workers (both threads)", "workers2", n)]
if flood:
    rows += [("ordinary: established TCP, 50 k flows, NPM on", "ordinary", packets),
             ("syn: every packet a new TCP flow, NPM on", "syn", packets // 5)]
base = load("tcpdump")[0]
head = "| run | instructions / packet | vs tcpdump |" + (" L2 misses / packet |" if cache else "")
print(head)
print("|---|---:|---:|" + ("---:|" if cache else ""))
data = {}
for label, name, count in rows:
    total, l2, by, l2by = load(name)
    data[name] = (by, l2by, count)
    cells = f"| {label} | {total / count:,.0f} | {total / count / (base / n):.2f}x |"
    if cache:
        cells += f" {l2 / count:.2f} |"
    print(cells)
print()
print("| stage (instructions / packet) | " + " | ".join(STAGES) + " |")
print("|---|" + "---:|" * len(STAGES))
for label, name, _ in rows[1:]:
    by, _, count = data[name]
    print(f"| {label} | " + " | ".join(f"{by[s] / count:,.0f}" for s in STAGES) + " |")
if cache:
    print()
    print("| stage (L2 misses / packet) | " + " | ".join(STAGES) + " | flow state (flow + metrics) |")
    print("|---|" + "---:|" * (len(STAGES) + 1))
    for label, name, _ in rows[1:]:
        _, l2by, count = data[name]
        state = (l2by["flow"] + l2by["metrics"]) / count
        print(f"| {label} | " + " | ".join(f"{l2by[s] / count:.2f}" for s in STAGES)
              + f" | {state:.2f} |")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
