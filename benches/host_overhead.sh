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
# apart (its CPU time during the transfer, start-up excluded; included in
# the core figures). Figures are medians
# over the rounds, as ratios against the no-probe run of the same round.
#
# Configurations, in this order in every round: none; empty — programs
# that return at once, at exactly the hooks the probe takes (hidden
# `--empty-programs`): the kernel's own cost of running any program there,
# the floor under the probe's; sampled (1 per 72,400 B, the default); all
# (every send and read timed); window (sampled, and the layer programs
# attached only --window of every --window-every, 100ms of 2s unless told:
# time sampling, `--sample-window`).
#
# --bpf-stats: afterwards one bulk run per probe configuration with
# kernel.bpf_stats_enabled=1 (restored after), printing each program's run
# count and mean run time (bpftool). Not part of the rounds: the statistics
# cost two clock reads per program run themselves.
#
# --extra NAME='ARGS' adds a configuration running `xdprobe host --port
# 5201 ARGS` (e.g. other hooks) to every round, after the four.
#
# usage: benches/host_overhead.sh [--rounds N] [--seconds S] [--rate R]
#                                 [--window D] [--window-every D]
#                                 [--configs none,empty,sampled,all,window]
#                                 [--loads bulk,paced] [--extra NAME=ARGS]...
#                                 [--bpf-stats] [--no-build]
#   needs root, iperf3, taskset, python3 (bpftool for --bpf-stats). Writes
#   nothing outside a temp dir.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=3
SECONDS_PER_RUN=8
RATE=2G
WINDOW=100ms
WINDOW_EVERY=2s
CONFIG_LIST=none,empty,sampled,all,window
BUILD=1
LOADS=bulk,paced
BPF_STATS=0
EXTRA_NAMES=()
declare -A EXTRA_ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --configs) CONFIG_LIST=$2; shift 2 ;;
        --window-every) WINDOW_EVERY=$2; shift 2 ;;
        --loads) LOADS=$2; shift 2 ;;
        --bpf-stats) BPF_STATS=1; shift ;;
        --extra) EXTRA_NAMES+=("${2%%=*}"); EXTRA_ARGS[${2%%=*}]=${2#*=}; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "host_overhead.sh: needs root (namespaces, eBPF)" >&2; exit 1; }
for t in iperf3 taskset python3 ip; do
    command -v "$t" >/dev/null || { echo "host_overhead.sh: $t not found" >&2; exit 1; }
done
if [ "$BPF_STATS" = 1 ]; then
    command -v bpftool >/dev/null || { echo "host_overhead.sh: bpftool not found" >&2; exit 1; }
fi
[ "$(nproc)" -ge 2 ] || { echo "host_overhead.sh: needs two cores" >&2; exit 1; }

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p xdprobe --bin xdprobe)
fi
XDPROBE=$TARGET/release/xdprobe

WORK=$(mktemp -d /tmp/xdprobe-hostbench.XXXXXX)
C=xdhb-c-$$
S=xdhb-s-$$
STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
PROBE_PID=
cleanup() {
    # a probe of a run the script did not finish
    [ -n "$PROBE_PID" ] && kill -TERM "$PROBE_PID" 2>/dev/null
    if [ "$BPF_STATS" = 1 ]; then sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE" 2>/dev/null || true; fi
    # this run's server only (other sessions may run the same script)
    [ -s "$WORK/server.pid" ] && kill "$(cat "$WORK/server.pid")" 2>/dev/null
    sleep 0.2
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
ip netns exec "$S" taskset -c 1 iperf3 -s -B 192.0.2.2 -p 5201 -D --logfile "$WORK/server.log" \
    -I "$WORK/server.pid"
sleep 1

# busy jiffies of cores 0 and 1: user nice system idle iowait irq softirq steal
cpu_busy() {
    awk '/^cpu[01] / { print $1, $2 + $3 + $4 + $7 + $8 }' /proc/stat
}

# Tracing programs loaded on this kernel that are not this run's probe's
# (other users' probes at the same tracepoints slow every configuration,
# "none" too). $1: a file of our program IDs, or nothing.
foreign_progs() {
    bpftool prog show --json 2>/dev/null | python3 -c '
import json, sys
ours = {int(l) for l in open(sys.argv[1]) if l.strip()} if len(sys.argv) > 1 else set()
kinds = {"tracepoint", "raw_tracepoint", "tracing", "kprobe", "perf_event"}
print(sum(1 for p in json.load(sys.stdin) if p["type"] in kinds and p["id"] not in ours))
' "$@" 2>/dev/null || echo 0
}

# run NAME LOAD: one iperf3 run under the named configuration; prints
# "NAME LOAD MBITS CPU0 CPU1 PROBE_CPU FOREIGN" (CPU in seconds; FOREIGN:
# the most tracing programs of others loaded at the run's start or end).
run_one() {
    local name=$1 load=$2
    local probe_pid="" foreign0 foreign1=0
    foreign0=$(foreign_progs)
    case $name in
        none) ;;
        empty) taskset -c 1 "$XDPROBE" host --port 5201 --empty-programs >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
        all) taskset -c 1 "$XDPROBE" host --port 5201 --sample-bytes 0 >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
        sampled) taskset -c 1 "$XDPROBE" host --port 5201 --sample-bytes 72400 >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
        window) taskset -c 1 "$XDPROBE" host --port 5201 --sample-bytes 72400 --sample-window "$WINDOW" \
                    --sample-window-every "$WINDOW_EVERY" >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
        *) # shellcheck disable=SC2086 # the extra configuration's words
           taskset -c 1 "$XDPROBE" host --port 5201 ${EXTRA_ARGS[$name]} >/dev/null 2>"$WORK/probe.err" &
             probe_pid=$! ;;
    esac
    PROBE_PID=$probe_pid
    if [ -n "$probe_pid" ]; then
        for _ in $(seq 100); do grep -q sock_rx "$WORK/probe.err" 2>/dev/null && break; sleep 0.1; done
        grep -q sock_rx "$WORK/probe.err" || { cat "$WORK/probe.err" >&2; exit 1; }
    fi
    local rate_arg=()
    [ "$load" = paced ] && rate_arg=(-b "$RATE")
    local before after probe_cpu0=0
    # the probe's CPU during the transfer only (its start-up — BTF, loading
    # and verifying the programs — is not part of what it costs to run)
    [ -n "$probe_pid" ] && probe_cpu0=$(awk '{ print $14 + $15 }' "/proc/$probe_pid/stat")
    before=$(cpu_busy)
    ip netns exec "$C" taskset -c 0 iperf3 -c 192.0.2.2 -p 5201 -t "$SECONDS_PER_RUN" \
        "${rate_arg[@]}" -J >"$WORK/client.json"
    after=$(cpu_busy)
    local probe_cpu=0
    if [ -n "$probe_pid" ]; then
        [ -n "${STATS_OUT:-}" ] && bpftool prog show --json >"$STATS_OUT"
        # the probe's programs: those its process holds fds of
        cat /proc/"$probe_pid"/fdinfo/* 2>/dev/null | awk '/^prog_id:/ { print $2 }' >"$WORK/ours.ids"
        [ -n "${STATS_OUT:-}" ] && cp "$WORK/ours.ids" "$STATS_OUT.ids"
        foreign1=$(foreign_progs "$WORK/ours.ids")
    else
        foreign1=$(foreign_progs)
    fi
    if [ -n "$probe_pid" ]; then
        probe_cpu=$(awk -v c0="$probe_cpu0" '{ print ($14 + $15 - c0) / 100 }' "/proc/$probe_pid/stat")
        kill -TERM "$probe_pid"
        wait "$probe_pid" || true
        PROBE_PID=
    fi
    python3 - "$name" "$load" "$WORK/client.json" "$before" "$after" "$probe_cpu" \
        $((foreign0 > foreign1 ? foreign0 : foreign1)) <<'PY'
import json, sys
name, load, path, before, after, probe, foreign = sys.argv[1:8]
j = json.load(open(path))
mbits = j["end"]["sum_received"]["bits_per_second"] / 1e6
b = dict(zip(before.split()[0::2], map(int, before.split()[1::2])))
a = dict(zip(after.split()[0::2], map(int, after.split()[1::2])))
hz = 100.0
print(name, load, f"{mbits:.1f}", (a["cpu0"] - b["cpu0"]) / hz, (a["cpu1"] - b["cpu1"]) / hz, probe, foreign)
PY
}

read -r -a CONFIGS <<<"${CONFIG_LIST//,/ }"
CONFIGS+=("${EXTRA_NAMES[@]}")
[ "${CONFIGS[0]}" = none ] || { echo "host_overhead.sh: --configs must start with none" >&2; exit 2; }
for load in ${LOADS//,/ }; do
    for r in $(seq "$ROUNDS"); do
        for cfg in "${CONFIGS[@]}"; do
            run_one "$cfg" "$load" | sed "s/\$/ $r/" | tee -a "$WORK/results.txt" >&2
        done
    done
done

python3 - "$WORK/results.txt" "$SECONDS_PER_RUN" "$RATE" "$WINDOW" "$WINDOW_EVERY" "${CONFIGS[@]}" <<'PY'
import sys, statistics as st
# NAME LOAD MBITS CPU0 CPU1 PROBE_CPU FOREIGN ROUND
rows = [l.split() for l in open(sys.argv[1])]
secs, rate, window, window_every = float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
configs = sys.argv[6:]
labels = {"none": "none", "empty": "empty programs, same hooks",
          "sampled": "1 per 72,400 B (default)", "all": "every send/read (`--sample-bytes 0`)",
          "window": f"1 per 72,400 B, attached {window} of every {window_every}"}
loads = [l for l in ["bulk", "paced"] if any(r[1] == l for r in rows)]
pct = lambda x: f"{(x - 1) * 100:+.1f} %"
print("| load | probe | throughput | vs none (median of per-round ratios) | same, clean rounds | "
      "sender core CPU/GB vs none | receiver core CPU/GB vs none | probe process CPU |")
print("|---|---|---|---|---|---|---|---|")
notes = []
for load in loads:
    rounds = {}
    for r in rows:
        if r[1] == load:
            rounds.setdefault(r[7], {})[r[0]] = r
    # clean: no other user's tracing programs loaded during any run of it
    clean = [k for k, v in rounds.items() if all(int(x[6]) == 0 for x in v.values())]
    def ratios(cfg, i, keys, per_gb=False):
        out = []
        for k in keys:
            v = rounds[k]
            if cfg not in v or "none" not in v:
                continue
            x, y = float(v[cfg][i]), float(v["none"][i])
            if per_gb:
                x, y = x / float(v[cfg][2]), y / float(v["none"][2])
            out.append(x / y)
        return out
    for cfg in configs:
        mb = st.median(float(v[cfg][2]) for v in rounds.values() if cfg in v)
        if cfg == "none":
            print(f"| {load} | none | {mb:.0f} Mbit/s | | | | | |")
            continue
        t = ratios(cfg, 2, rounds)
        tc = ratios(cfg, 2, clean)
        c0 = ratios(cfg, 3, rounds, True)
        c1 = ratios(cfg, 4, rounds, True)
        pc = st.median(float(v[cfg][5]) for v in rounds.values() if cfg in v)
        tcs = f"{pct(st.median(tc))} ({len(tc)})" if tc else "no clean round"
        print(f"| {load} | {labels.get(cfg, cfg)} | {mb:.0f} Mbit/s | **{pct(st.median(t))}** | {tcs} | "
              f"{pct(st.median(c0))} | {pct(st.median(c1))} | {pc:.2f} s |")
        notes.append(f"{load} {cfg} vs none per round (%): "
                     + " ".join(f"{(x - 1) * 100:+.1f}" for x in t))
    if "empty" in configs:
        e = st.median(ratios("empty", 2, rounds))
        for cfg in [c for c in configs if c not in ("none", "empty")]:
            m = st.median(ratios(cfg, 2, rounds))
            if m < 1:
                notes.append(f"{load}: the empty programs' loss is {(1 - e) / (1 - m) * 100:.0f} % "
                             f"of {cfg}'s (medians of per-round ratios)")
    notes.append(f"{load}: {len(rounds)} rounds, {len(clean)} clean "
                 "(no other user's tracing programs loaded)")
print(f"\n{len(rows)} runs of {secs:.0f} s; paced load at {rate}bit/s; throughput: median of the "
      "runs; ratios: median over rounds of each run against the same round's none.")
print("\n".join(notes))
PY

if [ "$BPF_STATS" = 1 ]; then
    sysctl -q -w kernel.bpf_stats_enabled=1
    echo
    echo "bpf_stats (one bulk run of ${SECONDS_PER_RUN} s per configuration):"
    echo "| configuration | program | runs | mean | CPU |"
    echo "|---|---|---:|---:|---:|"
    for cfg in "${CONFIGS[@]:1}"; do
        STATS_OUT=$WORK/stats-$cfg.json
        run_one "$cfg" bulk >>"$WORK/stats-runs.txt"
        python3 - "$cfg" "$STATS_OUT" "$STATS_OUT.ids" <<'PY'
import json, sys
cfg, path, ids = sys.argv[1], sys.argv[2], sys.argv[3]
ids = {int(l) for l in open(ids) if l.strip()}
total_n = total_t = 0
for p in json.load(open(path)):
    if p["id"] not in ids:
        continue
    n, t = p.get("run_cnt", 0), p.get("run_time_ns", 0)
    if n == 0:
        continue
    total_n, total_t = total_n + n, total_t + t
    print(f"| {cfg} | `{p['name']}` | {n} | {t / n:.0f} ns | {t / 1e6:.0f} ms |")
if total_n:
    print(f"| {cfg} | all programs | {total_n} | {total_t / total_n:.0f} ns | {total_t / 1e6:.0f} ms |")
PY
    done
    unset STATS_OUT
    sed 's/^/bpf_stats run: /' "$WORK/stats-runs.txt"
    sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE"
fi
