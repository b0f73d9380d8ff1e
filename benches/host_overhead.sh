#!/usr/bin/env bash
# What the host stack-latency probe costs an iperf3 bulk transfer between
# two network namespaces (veth, the kernel's default offloads), as the
# published LatScope figures measure it: throughput, and the CPU time of the
# sending and receiving cores, with and without the probe, unsampled and
# with one sample per 72,400 bytes.
#
# Two loads, each in rounds that alternate the configurations (so the
# machine's other load hits them alike):
#   bulk  — iperf3 unlimited: the probe's cost shows as lost throughput;
#   paced — iperf3 at a fixed rate below the ceiling: it shows as CPU time.
# CPU is read per core from /proc/stat (user+system+irq+softirq, not steal)
# with the iperf3 client pinned to core 0 and the server to core 1; the
# probe's own process is pinned to core 1 and its CPU time is reported
# apart (and included in the receiver core's figure). Figures are medians
# over the rounds, as ratios against the no-probe run of the same round.
#
# usage: benches/host_overhead.sh [--rounds N] [--seconds S] [--rate R] [--no-build]
#   needs root, iperf3, taskset, python3. Writes nothing outside a temp dir.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=3
SECONDS_PER_RUN=8
RATE=2G
BUILD=1
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "host_overhead.sh: needs root (namespaces, eBPF)" >&2; exit 1; }
for t in iperf3 taskset python3 ip; do
    command -v "$t" >/dev/null || { echo "host_overhead.sh: $t not found" >&2; exit 1; }
done
[ "$(nproc)" -ge 2 ] || { echo "host_overhead.sh: needs two cores" >&2; exit 1; }

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p xdprobe --bin xdprobe)
fi
XDPROBE=$TARGET/release/xdprobe

WORK=$(mktemp -d /tmp/xdprobe-hostbench.XXXXXX)
C=xdhb-c-$$
S=xdhb-s-$$
cleanup() {
    pkill -f "iperf3 -s -B 192.0.2.2" 2>/dev/null || true
    ip netns del "$C" 2>/dev/null || true
    ip netns del "$S" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

ip netns add "$C"
ip netns add "$S"
ip -n "$C" link add c0 type veth peer name s0 netns "$S"
ip -n "$C" addr add 192.0.2.1/24 dev c0
ip -n "$S" addr add 192.0.2.2/24 dev s0
for ns in "$C" "$S"; do ip -n "$ns" link set lo up; done
ip -n "$C" link set c0 up
ip -n "$S" link set s0 up
ip netns exec "$S" taskset -c 1 iperf3 -s -B 192.0.2.2 -p 5201 -D --logfile "$WORK/server.log"
sleep 1

# busy jiffies of cores 0 and 1: user nice system idle iowait irq softirq steal
cpu_busy() {
    awk '/^cpu[01] / { print $1, $2 + $3 + $4 + $7 + $8 }' /proc/stat
}

# run NAME ARGS...: one iperf3 run under the named configuration; prints
# "NAME MBITS CPU0 CPU1 PROBE_CPU" (CPU in seconds).
run_one() {
    local name=$1 load=$2
    local probe_pid=""
    case $name in
        none) ;;
        all) "$XDPROBE" host --port 5201 --sample-bytes 0 >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
        sampled) "$XDPROBE" host --port 5201 --sample-bytes 72400 >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
    esac
    if [ -n "$probe_pid" ]; then
        for _ in $(seq 100); do grep -q sock_rx "$WORK/probe.err" 2>/dev/null && break; sleep 0.1; done
        grep -q sock_rx "$WORK/probe.err" || { cat "$WORK/probe.err" >&2; exit 1; }
    fi
    local rate_arg=()
    [ "$load" = paced ] && rate_arg=(-b "$RATE")
    local before after
    before=$(cpu_busy)
    ip netns exec "$C" taskset -c 0 iperf3 -c 192.0.2.2 -p 5201 -t "$SECONDS_PER_RUN" \
        "${rate_arg[@]}" -J >"$WORK/client.json"
    after=$(cpu_busy)
    local probe_cpu=0
    if [ -n "$probe_pid" ]; then
        probe_cpu=$(awk '{ print ($14 + $15) / 100 }' "/proc/$probe_pid/stat")
        kill -TERM "$probe_pid"
        wait "$probe_pid" || true
    fi
    python3 - "$name" "$load" "$WORK/client.json" "$before" "$after" "$probe_cpu" <<'PY'
import json, sys
name, load, path, before, after, probe = sys.argv[1:7]
j = json.load(open(path))
mbits = j["end"]["sum_received"]["bits_per_second"] / 1e6
b = dict(zip(before.split()[0::2], map(int, before.split()[1::2])))
a = dict(zip(after.split()[0::2], map(int, after.split()[1::2])))
hz = 100.0
print(name, load, f"{mbits:.1f}", (a["cpu0"] - b["cpu0"]) / hz, (a["cpu1"] - b["cpu1"]) / hz, probe)
PY
}

for load in bulk paced; do
    for r in $(seq "$ROUNDS"); do
        for cfg in none all sampled; do
            run_one "$cfg" "$load" | tee -a "$WORK/results.txt" >&2
        done
    done
done

python3 - "$WORK/results.txt" "$SECONDS_PER_RUN" "$RATE" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
secs, rate = float(sys.argv[2]), sys.argv[3]
def med(load, cfg, i):
    return st.median(float(r[i]) for r in rows if r[0] == cfg and r[1] == load)
print(f"| load | probe | throughput | vs none | sender core CPU/GB | vs none | receiver core CPU/GB | vs none | probe process CPU |")
print("|---|---|---|---|---|---|---|---|---|")
for load in ["bulk", "paced"]:
    base = None
    for cfg, label in [("none", "none"), ("all", "every send/read"), ("sampled", "1 per 72,400 B")]:
        mb = med(load, cfg, 2)
        gb = mb * secs / 8000.0
        c0 = med(load, cfg, 3) / gb
        c1 = med(load, cfg, 4) / gb
        pc = med(load, cfg, 5)
        if base is None:
            base = (mb, c0, c1)
            print(f"| {load} | {label} | {mb:.0f} Mbit/s | | {c0*1000:.1f} ms | | {c1*1000:.1f} ms | | |")
        else:
            d = lambda x, y: f"{(x / y - 1) * 100:+.1f} %"
            print(f"| {load} | {label} | {mb:.0f} Mbit/s | {d(mb, base[0])} | {c0*1000:.1f} ms | {d(c0, base[1])} | {c1*1000:.1f} ms | {d(c1, base[2])} | {pc:.2f} s |")
print(f"\n{len(rows)} runs of {secs:.0f} s; paced load at {rate}bit/s; medians per configuration.")
PY
