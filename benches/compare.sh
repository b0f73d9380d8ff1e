#!/usr/bin/env bash
# Whole-process comparison of xdprobe with its peers on one capture file.
#
# Builds xdprobe (release-lto), makes sure the benchmark capture exists,
# then runs each tool RUNS times, round-robin (one run of every tool per
# round, so load from other processes hits them alike), and takes the median
# wall time and max RSS from /usr/bin/time. Writes a Markdown table into
# benches/LOG.md between the `compare` markers, and a memory table (xdprobe's
# max RSS against the number of concurrent flows) between the `memory`
# markers.
#
# usage: benches/compare.sh [--runs N] [--short] [--no-build] [--no-memory]
#                           [--no-write] [--baseline BIN] [--bin BIN] [FILE]
#   FILE      capture to read (default $XDPROBE_BENCH_PCAP or /tmp/bench.pcap;
#             generated with mkbench.py when missing)
#   --baseline BIN  an xdprobe binary built from another commit (e.g. before
#             timestamp RTT), run on both inputs in the same rounds
#   --bin BIN an xdprobe binary to time instead of building one
#   --short   only the rows the whole-process targets need: xdprobe NPM on
#             with 1 and 2 workers (and --no-npm with 2), the peers, and
#             the baseline's 1 and 2 workers; no timestamped input, no
#             memory table, BENCHMARKS.md left alone
#   env       MKBENCH (path of mkbench.py), CARGO_TARGET_DIR
#
# The same packets with the TCP timestamp option on every TCP segment
# (benches/support/tcp_ts.rs, written by the add_tcp_timestamps example to
# target/bench-data/) are read too: NPM with and without timestamp RTT and
# NPM off, for the cost table between the `tsrtt` markers.
#
# Peers: softflowd 1.1.0 (exports NetFlow to a loopback UDP port nobody
# listens on), nfdump 1.7.1 nfpcapd (writes nfcapd files into a temp dir),
# argus 3.0.8 (`argus -r`, writes its records into a temp file; Debian's
# argus-server, not installed by deploy/bootstrap.sh: no test needs it),
# tcpdump (read and discard: the ceiling of a libpcap reader). A peer that
# is not installed is left out with a message; tcpdump is required.
#
# After the table, the targets' ratios (issues 11 and 27): each as the
# median of the per-round ratios (the rounds alternate the tools, so a
# ratio within a round is taken under one load) and as the ratio of the
# medians.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
MKBENCH=${MKBENCH:-/work/shared/tools/mkbench.py}
RUNS=3
SHORT=0
XDP_BIN=""
BUILD=1
MEMORY=1
WRITE=1
BASELINE=""
FILE=${XDPROBE_BENCH_PCAP:-/tmp/bench.pcap}
while [ $# -gt 0 ]; do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --no-memory) MEMORY=0; shift ;;
        --no-write) WRITE=0; shift ;;
        --baseline) BASELINE=$2; shift 2 ;;
        --bin) XDP_BIN=$2; BUILD=0; shift 2 ;;
        --short) SHORT=1; MEMORY=0; WRITE=0; shift ;;
        -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) FILE=$1; shift ;;
    esac
done
# Export target for softflowd: loopback only, a port nobody listens on.
SF_PORT=39999

for t in tcpdump python3; do
    command -v "$t" >/dev/null || { echo "compare.sh: $t not found" >&2; exit 1; }
done
have() { command -v "$1" >/dev/null || { echo "compare.sh: $1 not installed, its rows are left out" >&2; return 1; }; }
[ -x /usr/bin/time ] || { echo "compare.sh: /usr/bin/time (GNU time) not found" >&2; exit 1; }

WORK=$(mktemp -d /tmp/xdprobe-compare.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# A generated capture goes where it was asked for, never into shared data.
gen_pcap() { # OUT ARGS...
    local out=$1; shift
    case $(realpath -m "$out") in
        /work/shared/*) echo "compare.sh: refusing to write $out into shared/" >&2; exit 1 ;;
    esac
    mkdir -p "$(dirname "$out")"
    echo "generating $out ($*), takes a while ..." >&2
    python3 "$MKBENCH" "$out.part" "$@" >&2
    mv "$out.part" "$out"
}

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --profile release-lto -p xdprobe --bin xdprobe)
fi
XDP=${XDP_BIN:-$TARGET/release-lto/xdprobe}
[ -x "$XDP" ] || { echo "compare.sh: $XDP missing (run without --no-build)" >&2; exit 1; }

[ -f "$FILE" ] || gen_pcap "$FILE" --flows 400000 --concurrent 50000 --seed 7
TSFILE=$TARGET/bench-data/$(basename "$FILE" .pcap)-tcp-ts.pcap
if [ "$SHORT" = 0 ] && { [ ! -f "$TSFILE" ] || [ "$TSFILE" -ot "$FILE" ]; }; then
    mkdir -p "$(dirname "$TSFILE")"
    (cd "$ROOT" && cargo run --release --quiet -p xdprobe-dataplane --example add_tcp_timestamps -- "$FILE" "$TSFILE.part")
    mv "$TSFILE.part" "$TSFILE"
fi
[ "$SHORT" = 1 ] || cat "$TSFILE" >/dev/null
# Page cache warm for everyone: the comparison is CPU, not disk.
cat "$FILE" >/dev/null

PACKETS=$("$XDP" pcap "$FILE" --format none --stats --workers 1 2>&1 | sed -n 's/.*frames \([0-9]*\) .*/\1/p' | head -1)
[ -n "$PACKETS" ] || { echo "compare.sh: could not count packets with xdprobe" >&2; exit 1; }

# name|command (FILE and WORK substituted by the shell below)
TOOLS=(
    "xdprobe (NPM on)|$XDP pcap $FILE --format none --workers 1"
    "xdprobe --workers 2 (NPM on)|$XDP pcap $FILE --format none --workers 2"
    "xdprobe --workers 2 --no-npm|$XDP pcap $FILE --format none --no-npm --workers 2"
    "tcpdump -w /dev/null|tcpdump -r $FILE -w /dev/null"
)
# L7 (issue 23) is on by default; its cost is the difference to --no-l7.
if "$XDP" pcap --help 2>/dev/null | grep -q -- '--no-l7'; then
    TOOLS+=(
        "xdprobe --no-l7 (NPM on)|$XDP pcap $FILE --format none --no-l7 --workers 1"
        "xdprobe --workers 2 --no-l7 (NPM on)|$XDP pcap $FILE --format none --no-l7 --workers 2"
    )
fi
[ "$SHORT" = 1 ] || TOOLS+=("xdprobe --no-npm|$XDP pcap $FILE --format none --no-npm --workers 1")
if have softflowd; then
    TOOLS+=("softflowd|softflowd -r $FILE -c none -A milli -n 127.0.0.1:$SF_PORT -p $WORK/sf.pid")
    [ "$SHORT" = 1 ] || TOOLS+=("softflowd -m 262144|softflowd -r $FILE -c none -A milli -n 127.0.0.1:$SF_PORT -p $WORK/sf.pid -m 262144")
fi
have nfpcapd && TOOLS+=("nfpcapd|nfpcapd -r $FILE -w $WORK/nf")
have argus && TOOLS+=("argus|argus -r $FILE -w $WORK/argus.out")
[ "$SHORT" = 1 ] || TOOLS+=(
    "xdprobe, TS input (NPM + TS-RTT)|$XDP pcap $TSFILE --format none --workers 1"
    "xdprobe, TS input --no-ts-rtt|$XDP pcap $TSFILE --format none --no-ts-rtt --workers 1"
    "xdprobe, TS input --no-npm|$XDP pcap $TSFILE --format none --no-npm --workers 1"
)
if [ -n "$BASELINE" ]; then
    [ -x "$BASELINE" ] || { echo "compare.sh: $BASELINE is not executable" >&2; exit 1; }
    # One worker, as the rows it is compared with, where the baseline has
    # the option (its default is then every core).
    BW=""
    "$BASELINE" pcap --help 2>/dev/null | grep -q -- '--workers' && BW="--workers 1"
    TOOLS+=("baseline (NPM on)|$BASELINE pcap $FILE --format none $BW")
    [ -n "$BW" ] && TOOLS+=("baseline --workers 2 (NPM on)|$BASELINE pcap $FILE --format none --workers 2")
    if "$BASELINE" pcap --help 2>/dev/null | grep -q -- '--no-l7'; then
        TOOLS+=(
            "baseline --no-l7 (NPM on)|$BASELINE pcap $FILE --format none --no-l7 $BW"
            "baseline --workers 2 --no-l7 (NPM on)|$BASELINE pcap $FILE --format none --no-l7 --workers 2"
        )
    fi
    [ "$SHORT" = 1 ] || TOOLS+=("baseline, TS input (NPM on)|$BASELINE pcap $TSFILE --format none $BW")
fi
# Index of a tool by name (for the cost table).
tool() { local i; for i in "${!TOOLS[@]}"; do [ "${TOOLS[$i]%%|*}" = "$1" ] && echo "$i"; done; return 0; }

# run_once INDEX: appends "wall rss_kb user sys" to $WORK/res.INDEX
run_once() {
    local i=$1 cmd=${TOOLS[$1]#*|}
    rm -rf "$WORK/nf" "$WORK/argus.out" && mkdir -p "$WORK/nf"
    # shellcheck disable=SC2086 # the command is a word list on purpose
    if ! /usr/bin/time -f '%e %M %U %S' -o "$WORK/time" $cmd >"$WORK/out.$i" 2>&1; then
        echo "compare.sh: failed: $cmd (see output below)" >&2
        tail -5 "$WORK/out.$i" >&2
        exit 1
    fi
    tail -1 "$WORK/time" >>"$WORK/res.$i"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$RUNS"); do
    for i in "${!TOOLS[@]}"; do
        echo "round $r/$RUNS: ${TOOLS[$i]%%|*}" >&2
        run_once "$i"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

declare -A WALL RSS CPU
for i in "${!TOOLS[@]}"; do
    WALL[$i]=$(awk '{print $1}' "$WORK/res.$i" | median)
    RSS[$i]=$(awk '{print $2}' "$WORK/res.$i" | median)
    CPU[$i]=$(awk '{print $3 + $4}' "$WORK/res.$i" | median)
done
# A missing peer's column reads "–".
peer() { local i; i=$(tool "$1"); [ -n "$i" ] && echo "${WALL[$i]}" || echo 0; }
SF=$(peer softflowd) NF=$(peer nfpcapd) AR=$(peer argus) TD=$(peer "tcpdump -w /dev/null")

TABLE=$WORK/table.md
{
    echo "Run $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $PACKETS packets of \`$(basename "$FILE")\`,"
    echo "median of $RUNS round-robin runs; load average before/after: $LOAD_BEFORE / $LOAD_AFTER."
    echo
    echo "| tool | wall s | CPU s | packets/s | vs softflowd | vs nfpcapd | vs argus | vs tcpdump | max RSS MB |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for i in "${!TOOLS[@]}"; do
        awk -v n="${TOOLS[$i]%%|*}" -v w="${WALL[$i]}" -v c="${CPU[$i]}" -v r="${RSS[$i]}" \
            -v p="$PACKETS" -v sf="$SF" -v nf="$NF" -v ar="$AR" -v td="$TD" '
            # /usr/bin/time has 10 ms resolution: keep tiny files finite.
            function vs(peer) { return peer > 0 ? sprintf("%.2f×", (peer < 0.01 ? 0.01 : peer) / w) : "–" }
            BEGIN {
            if (w < 0.01) w = 0.01
            printf "| %s | %.2f | %.2f | %.2f M | %s | %s | %s | %s | %.0f |\n",
                n, w, c, p / w / 1e6, vs(sf), vs(nf), vs(ar), vs(td), r / 1024 }'
    done
    echo
    echo "xdprobe maps the capture (\`MAP_POPULATE\`), so its RSS counts the file's"
    echo "$(($(stat -c %s "$FILE") / 1048576)) MB of page cache; the peers read it through libpcap's buffer."
    echo
    echo "Commands (\`FILE\` the capture, \`TMP\` a scratch directory):"
    echo
    for i in "${!TOOLS[@]}"; do
        cmd=${TOOLS[$i]#*|}
        # The binaries first, whole words: one path may start another.
        case $cmd in
            "$XDP "*) if [ -n "$XDP_BIN" ]; then name=XDPROBE; else name=$XDP; fi
                cmd="$name ${cmd#"$XDP "}" ;;
            "${BASELINE:-/nonexistent} "*) cmd="BASELINE ${cmd#"$BASELINE "}" ;;
        esac
        echo "- \`$(echo "$cmd" | sed -e "s#$TSFILE#TSFILE#g" -e "s#$FILE#FILE#g" -e "s#$WORK#TMP#g" -e "s#$ROOT/##g")\`"
    done
    echo
    [ "$SHORT" = 1 ] || echo "\`TSFILE\`: \`FILE\` with the TCP timestamp option on every TCP segment (\`benches/support/tcp_ts.rs\`)."
    [ -z "$XDP_BIN" ] || echo "\`XDPROBE\`: the binary given with \`--bin\`."
    [ -z "$BASELINE" ] || echo "\`BASELINE\`: \`xdprobe\` built with the same profile from another commit (\`--baseline\`)."
} >"$TABLE"
cat "$TABLE"

# --- the targets: per-round ratios ------------------------------------------
TARGETS=$WORK/targets.md
{
    echo
    echo "Targets (issues 11 and 27), wall time; median of the $RUNS per-round ratios (ratio of the medians):"
    echo
    echo "| ratio | per round | of medians | target |"
    echo "|---|---:|---:|---:|"
    # ratio NAME A B TARGET: how many times faster A is than B (B's wall / A's).
    ratio() {
        local a b; a=$(tool "$2"); b=$(tool "$3")
        [ -n "$a" ] && [ -n "$b" ] || return 0
        python3 - "$1" "$4" "$WORK/res.$a" "$WORK/res.$b" <<'PY'
import statistics, sys
name, target, a, b = sys.argv[1:5]
wa = [float(l.split()[0]) for l in open(a)]
wb = [float(l.split()[0]) for l in open(b)]
per = statistics.median(y / x for x, y in zip(wa, wb) if x > 0)
print(f"| {name} | {per:.2f}× | {statistics.median(wb) / statistics.median(wa):.2f}× | {target} |")
PY
    }
    ratio "xdprobe --workers 2 (NPM on) vs tcpdump" "xdprobe --workers 2 (NPM on)" "tcpdump -w /dev/null" "≥ 0.85× (moonshot ≥ 1.0×)"
    ratio "xdprobe --workers 2 (NPM on) vs softflowd" "xdprobe --workers 2 (NPM on)" softflowd "≥ 15×"
    ratio "xdprobe --workers 2 (NPM on) vs nfpcapd" "xdprobe --workers 2 (NPM on)" nfpcapd "–"
    ratio "xdprobe --workers 2 (NPM on) vs argus" "xdprobe --workers 2 (NPM on)" argus "–"
    ratio "xdprobe --workers 1 (NPM on) vs tcpdump" "xdprobe (NPM on)" "tcpdump -w /dev/null" "≥ 0.55×"
    ratio "xdprobe --workers 2 --no-npm vs tcpdump" "xdprobe --workers 2 --no-npm" "tcpdump -w /dev/null" "–"
    ratio "xdprobe --workers 1 --no-l7 vs tcpdump" "xdprobe --no-l7 (NPM on)" "tcpdump -w /dev/null" "–"
    ratio "xdprobe --workers 2 --no-l7 vs tcpdump" "xdprobe --workers 2 --no-l7 (NPM on)" "tcpdump -w /dev/null" "–"
    ratio "this build / baseline, 1 worker (above 1: faster)" "xdprobe (NPM on)" "baseline (NPM on)" "–"
    ratio "this build / baseline, 2 workers (above 1: faster)" "xdprobe --workers 2 (NPM on)" "baseline --workers 2 (NPM on)" "–"
    ratio "this build / baseline, 1 worker, --no-l7" "xdprobe --no-l7 (NPM on)" "baseline --no-l7 (NPM on)" "–"
    ratio "this build / baseline, 2 workers, --no-l7" "xdprobe --workers 2 --no-l7 (NPM on)" "baseline --workers 2 --no-l7 (NPM on)" "–"
} >"$TARGETS"
cat "$TARGETS"
cat "$TARGETS" >>"$TABLE"

# --- timestamp RTT: cost per packet, same run ------------------------------
TSTABLE=$WORK/tsrtt.md
[ "$SHORT" = 1 ] || {
    T=$(tool "xdprobe, TS input (NPM + TS-RTT)"); N=$(tool "xdprobe, TS input --no-ts-rtt")
    O=$(tool "xdprobe, TS input --no-npm"); P=$(tool "xdprobe (NPM on)")
    echo "Same run as above ($RUNS round-robin runs, median wall and CPU time), \`TSFILE\`:"
    echo
    echo "| comparison | wall ratio | CPU ratio |"
    echo "|---|---:|---:|"
    row() { awk -v n="$1" -v a="${WALL[$2]}" -v b="${WALL[$3]}" -v c="${CPU[$2]}" -v d="${CPU[$3]}" \
        'BEGIN { printf "| %s | %.3f | %.3f |\n", n, a / b, c / d }'; }
    row "NPM + TS-RTT / NPM without TS-RTT (TS input)" "$T" "$N"
    row "NPM + TS-RTT / NPM off (TS input)" "$T" "$O"
    row "NPM + TS-RTT on TS input / NPM on plain input" "$T" "$P"
    if [ -n "$BASELINE" ]; then
        B=$(tool "baseline (NPM on)"); BT=$(tool "baseline, TS input (NPM on)")
        row "this build / baseline, NPM on, plain input" "$P" "$B"
        row "this build / baseline, NPM on, TS input" "$T" "$BT"
    fi
} >"$TSTABLE"
[ "$SHORT" = 1 ] || cat "$TSTABLE"

# --- memory: max RSS against concurrent flows (default capacity) ---------
MEMTABLE=$WORK/memory.md
if [ "$MEMORY" = 1 ]; then
    DATA=$TARGET/bench-data
    {
        echo "xdprobe \`pcap --format none\`, default capacity (262 144 flows),"
        echo "captures from \`mkbench.py --flows N --concurrent N --data 1 --seed 7\` (all N flows open at once)."
        echo
        echo "xdprobe maps the capture file, so its max RSS includes the file; \"RSS − file\" takes it out."
        echo "Flows held at once are min(N, capacity); beyond the capacity the least recently seen are evicted."
        echo
        echo "| flows N | packets | evicted | max RSS MB | RSS − file MB | above the 1-flow run, bytes per flow held |"
        echo "|---:|---:|---:|---:|---:|---:|"
    } >"$MEMTABLE"
    BASE=""
    for n in 1 10000 50000 100000 250000 400000; do
        f=$DATA/flows-$n.pcap
        [ -f "$f" ] || gen_pcap "$f" --flows "$n" --concurrent "$n" --data 1 --seed 7
        /usr/bin/time -f '%M' -o "$WORK/time" "$XDP" pcap "$f" --format none --stats --workers 1 2>"$WORK/mem.err" >/dev/null
        rss=$(tail -1 "$WORK/time")
        size=$(($(stat -c %s "$f") / 1024))
        pk=$(sed -n 's/.*frames \([0-9]*\) .*/\1/p' "$WORK/mem.err" | head -1)
        ev=$(sed -n 's/.*evicted \([0-9]*\) .*/\1/p' "$WORK/mem.err" | head -1)
        [ -z "$BASE" ] && BASE=$((rss - size))
        awk -v n="$n" -v p="$pk" -v e="${ev:-?}" -v r="$rss" -v s="$size" -v b="$BASE" 'BEGIN {
            held = (n < 262144) ? n : 262144
            per = (n > 1) ? sprintf("%.0f", (r - s - b) * 1024 / held) : "–"
            printf "| %d | %d | %s | %.1f | %.1f | %s |\n", n, p, e, r / 1024, (r - s) / 1024, per }' >>"$MEMTABLE"
    done
    PERFLOW=$(cd "$ROOT" && cargo test -q -p xdprobe-dataplane --lib memory_per_flow -- --nocapture 2>/dev/null |
        grep -m1 'per flow' || true)
    { echo; echo "\`cargo test -p xdprobe-dataplane memory_per_flow -- --nocapture\`: $PERFLOW"; } >>"$MEMTABLE"
    cat "$MEMTABLE"
fi

# --- benches/LOG.md: replace the text between the markers -----------------
if [ "$WRITE" = 1 ]; then
    python3 - "$ROOT/benches/LOG.md" "$TABLE" compare "$MEMTABLE" memory "$TSTABLE" tsrtt <<'EOF'
import os, sys
path, pairs = sys.argv[1], sys.argv[2:]
doc = open(path).read() if os.path.exists(path) else "# Benchmarks log\n"
for table, name in zip(pairs[::2], pairs[1::2]):
    if not os.path.exists(table):
        continue
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{open(table).read().rstrip()}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
open(path, "w").write(doc)
EOF
    echo "benches/LOG.md updated (BENCHMARKS.md's table quotes the newest figures)" >&2
fi
