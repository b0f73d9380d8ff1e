#!/usr/bin/env bash
# What a send(2) call costs with the host probe's socket-layer hooks
# gated (between time-sampling windows) and attached, against no probe:
# per-call time of 1 M UDP sends on loopback (a connected socket to a
# socket that never reads: each send is a full syscall through
# sock_sendmsg, so sys_enter_sendto and sock:sock_send_length both fire),
# in rounds alternating the three configurations.
#
#   none     — no probe;
#   gated    — `xdprobe host --sample-window 10ms --sample-window-every 60s`:
#              closed all but the first 10 ms, so the classic socket hooks
#              are attached and return at the gate, the skb hooks detached;
#   attached — `xdprobe host` (always attached; the UDP packets also pass
#              the skb hooks, which read and drop them).
#
# usage: benches/host_gate_cost.sh [--rounds N] [--sends N] [--no-build]
#   needs root, cc, taskset. Writes nothing outside a temp dir; loopback only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=8
SENDS=1000000
BUILD=1
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --sends) SENDS=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "host_gate_cost.sh: needs root (eBPF)" >&2; exit 1; }
for t in cc taskset python3; do
    command -v "$t" >/dev/null || { echo "host_gate_cost.sh: $t not found" >&2; exit 1; }
done
if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p xdprobe --bin xdprobe)
fi
XDPROBE=$TARGET/release/xdprobe
WORK=$(mktemp -d /tmp/xdprobe-gatecost.XXXXXX)
PROBE_PID=
cleanup() {
    [ -n "$PROBE_PID" ] && kill -TERM "$PROBE_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/sendloop.c" <<'C'
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000001);
    int r = socket(AF_INET, SOCK_DGRAM, 0);
    socklen_t l = sizeof a;
    if (r < 0 || bind(r, (void *)&a, sizeof a) || getsockname(r, (void *)&a, &l)) return 1;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0 || connect(s, (void *)&a, sizeof a)) return 1;
    char buf[16] = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) send(s, buf, sizeof buf, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
    return 0;
}
C
cc -O2 -o "$WORK/sendloop" "$WORK/sendloop.c"

# one NAME: ns per send under that configuration
one() {
    local name=$1
    PROBE_PID=
    case $name in
        gated) taskset -c 1 "$XDPROBE" host --port 5201 --sample-window 10ms \
                   --sample-window-every 60s >/dev/null 2>"$WORK/probe.err" &
               PROBE_PID=$! ;;
        attached) taskset -c 1 "$XDPROBE" host --port 5201 >/dev/null 2>"$WORK/probe.err" &
               PROBE_PID=$! ;;
    esac
    if [ -n "$PROBE_PID" ]; then
        for _ in $(seq 100); do grep -q sock_rx "$WORK/probe.err" 2>/dev/null && break; sleep 0.1; done
        grep -q sock_rx "$WORK/probe.err" || { cat "$WORK/probe.err" >&2; exit 1; }
        sleep 0.3 # past the first window
    fi
    taskset -c 0 "$WORK/sendloop" "$SENDS"
    if [ -n "$PROBE_PID" ]; then
        kill -TERM "$PROBE_PID"
        wait "$PROBE_PID" || true
        PROBE_PID=
    fi
}

for r in $(seq "$ROUNDS"); do
    echo "$(one none) $(one gated) $(one attached)" | tee -a "$WORK/rounds.txt" >&2
done
python3 - "$WORK/rounds.txt" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
none = st.median(r[0] for r in rows)
print(f"ns per send(2), medians of {len(rows)} rounds: none {none:.0f}, "
      f"gated {st.median(r[1] for r in rows):.0f}, attached {st.median(r[2] for r in rows):.0f}")
print(f"added per call (median of per-round differences): gated "
      f"{st.median(r[1] - r[0] for r in rows):+.0f} ns, attached {st.median(r[2] - r[0] for r in rows):+.0f} ns")
PY
