#!/usr/bin/env bash
# What the L7 parsers (docs/l7.md) cost a whole `xdprobe pcap` run: L7 on
# (the default) against `--no-l7`, alternating runs (one of each per
# round, so load from other processes hits both alike), medians of wall
# time and of CPU time (user + sys, from bash's `time` to the millisecond;
# CPU is the steadier figure on a shared machine), on two captures:
#   - the benchmark capture (mkbench.py: synthetic TCP/UDP, little payload
#     any parser recognises: the cost of looking and finding nothing);
#   - a capture rich in TLS/QUIC/HTTP/DNS: tests/corpus/l7/xdprobe_l7-traffic.pcap
#     (real clients and servers, tests/l7_live.rs) repeated COPIES times,
#     each copy 60 s after the previous (editcap -t, mergecap -a), so every
#     copy's flows are new flows to parse.
#
# usage: benches/l7_cost.sh [FILE]
#   FILE  benchmark capture (default $XDPROBE_BENCH_PCAP or /tmp/bench.pcap;
#         generated with mkbench.py --flows 400000 --concurrent 50000 --seed 7
#         if missing)
#   env   RUNS (default 7), COPIES (default 1000: a run of ~0.1 s),
#         WORKERS (passed as --workers; default: the probe's own),
#         PROTOCOLS=1 (also, on the L7-rich capture, every parser off but
#         the label, and each protocol's parser alone: where the cost is),
#         FLOOR=1 (also, on the L7-rich capture, a build of HEAD with
#         benches/l7_floor.patch applied: the fingerprints (JA3, JA4) and the
#         QUIC Initials' keys and decryption computed twice, each first
#         result thrown away; what it adds over "on" is what that work costs,
#         and that work plus the label alone is a floor under any parser:
#         the issue asks for every one of those results),
#         BIN (default target/release/xdprobe, built if missing), MKBENCH
#         (path of mkbench.py)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release/xdprobe}
RUNS=${RUNS:-7}
COPIES=${COPIES:-1000}
WORKERS=${WORKERS:-}
PROTOCOLS=${PROTOCOLS:-0}
FLOOR=${FLOOR:-0}
common=(--format none --no-progress)
[ -n "$WORKERS" ] && common+=(--workers "$WORKERS")
TIMEFORMAT='%3R %3U %3S'
FILE=${1:-${XDPROBE_BENCH_PCAP:-/tmp/bench.pcap}}
MKBENCH=${MKBENCH:-/work/shared/tools/mkbench.py}

[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -p xdprobe --bin xdprobe)
if [ ! -f "$FILE" ]; then
    python3 "$MKBENCH" "$FILE.part" --flows 400000 --concurrent 50000 --seed 7
    mv "$FILE.part" "$FILE"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rich="$tmp/l7-rich.pcap"
for i in $(seq 0 $((COPIES - 1))); do
    editcap -F pcap -t $((i * 60)) "$ROOT/tests/corpus/l7/xdprobe_l7-traffic.pcap" "$tmp/part-$i.pcap"
done
mergecap -F pcap -a -w "$rich" $(for i in $(seq 0 $((COPIES - 1))); do echo "$tmp/part-$i.pcap"; done)
rm -f "$tmp"/part-*.pcap

# The floor build: HEAD's sources (not the working tree's changes) with the
# patch applied, built into its own target directory.
if [ "$FLOOR" = 1 ]; then
    git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$tmp" --one-top-level=floor-src
    (cd "$tmp/floor-src" && git apply "$ROOT/benches/l7_floor.patch") ||
        { echo "benches/l7_floor.patch no longer applies to HEAD: update it" >&2; exit 1; }
    (cd "$tmp/floor-src" && CARGO_TARGET_DIR="$ROOT/target/l7-floor" \
        cargo build --release -p xdprobe --bin xdprobe)
    FLOOR_BIN=$ROOT/target/l7-floor/release/xdprobe
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# One capture: RUNS rounds of (off, on, and any further variants as
# "name:flags"); prints the medians and each variant's cost over off.
measure() {
    local name=$1 cap=$2
    shift 2
    local variants=("off:--no-l7" "on:" "$@") v m flags
    rm -f "$tmp"/v.* "$tmp/medians"
    echo "$name: $(du -h "$cap" | cut -f1), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for _ in $(seq "$RUNS"); do
        for v in "${variants[@]}"; do
            m=${v%%:*}
            read -r -a flags <<<"${v#*:}"
            bin=$BIN
            [ "$m" = floor ] && bin=$FLOOR_BIN
            { time "$bin" pcap "$cap" "${common[@]}" "${flags[@]}" >/dev/null 2>&1; } 2>>"$tmp/v.$m"
        done
    done
    echo "$name: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    for v in "${variants[@]}"; do
        m=${v%%:*}
        wall=$(awk '{ print $1 }' "$tmp/v.$m" | median)
        cpu=$(awk '{ print $2 + $3 }' "$tmp/v.$m" | median)
        echo "$m $wall $cpu" >>"$tmp/medians"
        printf '%s: %-9s wall median %7.3f s   cpu median %7.3f s   (runs: %s)\n' "$name" "$m" \
            "$wall" "$cpu" "$(awk '{ printf "%s/%.3f ", $1, $2 + $3 }' "$tmp/v.$m")"
    done
    awk -v n="$name" '{ w[NR] = $2; c[NR] = $3; k[NR] = $1 }
         END { for (i = 2; i <= NR; i++)
                   printf "%s: %s costs %+.1f %% wall, %+.1f %% CPU over --no-l7\n",
                          n, (k[i] == "on" ? "L7 on" : k[i]), (w[i] / w[1] - 1) * 100, (c[i] / c[1] - 1) * 100 }' "$tmp/medians"
}

measure bench "$FILE"
if [ "$PROTOCOLS" = 1 ]; then
    all="--no-l7-tls --no-l7-quic --no-l7-http --no-l7-dns"
    measure l7-rich "$rich" "label:$all" \
        "tls:${all/--no-l7-tls /}" "quic:${all/--no-l7-quic /}" \
        "http:${all/--no-l7-http /}" "dns:${all% --no-l7-dns}"
elif [ "$FLOOR" != 1 ]; then
    measure l7-rich "$rich"
fi
if [ "$FLOOR" = 1 ]; then
    measure l7-rich "$rich" "label:--no-l7-tls --no-l7-quic --no-l7-http --no-l7-dns" "floor:"
    awk '{ c[$1] = $3 } END {
        x = (c["floor"] - c["on"]) / c["off"] * 100
        printf "l7-rich: the fingerprints and the QUIC Initials (keys, decryption) cost %+.1f %% CPU of --no-l7;\n", x
        printf "l7-rich: with the label alone (%+.1f %%) that is a floor of %+.1f %% under every parser (L7 on: %+.1f %%)\n",
               (c["label"] / c["off"] - 1) * 100, x + (c["label"] / c["off"] - 1) * 100,
               (c["on"] / c["off"] - 1) * 100 }' "$tmp/medians"
fi
"$BIN" pcap "$rich" --format none --no-progress --stats 2>&1 | grep -iE '^ *(l7|flows)' | head -20 || true
