#!/bin/sh
# setup-nic.sh: prepare a capture interface for xdprobe (appliance mode).
#
#   setup-nic.sh [-n] IFACE [QUEUES [CORES]]
#
#   IFACE   the capture interface (the [[interface]] name in probe.toml)
#   QUEUES  RX queues to use (default: leave the NIC's current count)
#   CORES   comma-separated CPU list, one per queue, in queue order: the
#           `core` values of probe.toml's `queues` (default: 0,1,2,...)
#   -n      dry run: print what would be done, change nothing
#
# Idempotent: every step sets an absolute state, so running it twice (or at
# every boot, or as ExecStartPre) is harmless. A step the driver does not
# support prints a WARNING and the script goes on (veth, for example, has
# no RSS key, no IRQs and fixed offload bits); the exit status is non-zero
# only for usage errors, a missing interface or a missing ethtool.
#
# What it does, and why (docs/operations.md has the details):
#  1. link up + promiscuous: a mirror port receives frames for other MACs.
#  2. queue count (ethtool -L): one AF_XDP socket and worker per RX queue;
#     every queue that can receive traffic must be listed in probe.toml.
#  3. symmetric RSS, so both directions of a flow land on one queue (and so
#     on one worker, which owns the flow): first try the kernel's
#     symmetric-xor transform (ethtool >= 6.8 and a driver that supports it),
#     else program the Toeplitz key 6d:5a repeated, which makes the hash of
#     (src, dst) equal the hash of (dst, src); hash on IPs and ports.
#  4. offloads that merge or split packets off (GRO, LRO, TSO, GSO, HW GRO):
#     the probe must see frames as they were on the wire; VLAN stripping off
#     so XDP sees the 802.1Q tag the [filter] vlans list matches on.
#  5. IRQ affinity: queue i's interrupt on the core of queue i's worker, so
#     the softirq that fills the AF_XDP ring runs where the worker reads it.
#  6. memlock: report the limit; the UMEM is locked memory.

set -u

DRY=0
if [ "${1:-}" = "-n" ]; then
    DRY=1
    shift
fi
IFACE="${1:-}"
QUEUES="${2:-}"
CORES="${3:-}"

WARNINGS=0
say() { printf 'setup-nic: %s\n' "$*"; }
warn() { printf 'setup-nic: WARNING: %s\n' "$*" >&2; WARNINGS=$((WARNINGS + 1)); }
die() { printf 'setup-nic: error: %s\n' "$*" >&2; exit 2; }

# run CMD...: run (or print, in dry-run mode); returns the command's status.
run() {
    if [ "$DRY" = 1 ]; then
        say "would run: $*"
        return 0
    fi
    "$@" >/dev/null 2>&1
}

# try WHAT CMD...: run, warn (not fail) when the driver refuses.
try() {
    what="$1"
    shift
    if run "$@"; then
        say "ok: $what"
    else
        warn "$what not supported here ($*)"
        return 1
    fi
}

[ -n "$IFACE" ] || die "usage: $0 [-n] IFACE [QUEUES [CORES]]"
[ -d "/sys/class/net/$IFACE" ] || die "no interface $IFACE"
command -v ethtool >/dev/null 2>&1 || die "ethtool not found (apt-get install ethtool)"
command -v ip >/dev/null 2>&1 || die "ip not found (apt-get install iproute2)"
case "$QUEUES" in
    '' | *[!0-9]*) [ -z "$QUEUES" ] || die "QUEUES must be a positive number, got '$QUEUES'" ;;
    0) die "QUEUES must be at least 1" ;;
esac
case "$CORES" in
    *[!0-9,]*) die "CORES must be a comma-separated list of CPU numbers, got '$CORES'" ;;
esac
if [ "$DRY" = 0 ] && [ "$(id -u)" != 0 ]; then
    die "run as root (or with -n for a dry run)"
fi

# --- 1. link up, promiscuous -----------------------------------------------
try "link $IFACE up" ip link set dev "$IFACE" up
try "promiscuous mode on $IFACE" ip link set dev "$IFACE" promisc on

# --- 2. queue count ----------------------------------------------------------
if [ -n "$QUEUES" ]; then
    # Drivers expose either combined channels or separate rx/tx ones.
    if ethtool -l "$IFACE" 2>/dev/null | grep -q '^Combined:[[:space:]]*[1-9]'; then
        try "$QUEUES combined queues" ethtool -L "$IFACE" combined "$QUEUES"
    else
        try "$QUEUES rx queues" ethtool -L "$IFACE" rx "$QUEUES"
    fi
fi
# What the NIC has now (the worker count probe.toml must cover).
ACTIVE=$(ethtool -l "$IFACE" 2>/dev/null | awk '
    /^Current hardware settings/ { cur = 1 }
    cur && /^(RX|Combined):/ { n += $2 }
    END { print n + 0 }')
if [ "$ACTIVE" -gt 0 ]; then
    say "$IFACE has $ACTIVE RX queue(s) active: list queues 0..$((ACTIVE - 1)) in probe.toml"
else
    RXQ=$(ls -d "/sys/class/net/$IFACE/queues/rx-"* 2>/dev/null | wc -l)
    warn "cannot read the channel count; $RXQ rx queue(s) in sysfs"
    ACTIVE=$RXQ
fi
[ -n "$QUEUES" ] || QUEUES=$ACTIVE

# --- 3. symmetric RSS ---------------------------------------------------------
SYMMETRIC=0
if run ethtool -X "$IFACE" hfunc toeplitz xfrm symmetric-xor; then
    say "ok: symmetric RSS via toeplitz + symmetric-xor"
    SYMMETRIC=1
else
    # Key length varies by driver (40 bytes on most, 52 on ice/i40e): read it.
    KEYLEN=$(ethtool -x "$IFACE" 2>/dev/null | awk '
        /^RSS hash key:/ { k = 1; next }
        k && /^[0-9a-f][0-9a-f]:/ { n += split($0, a, ":") }
        k && !/^[0-9a-f][0-9a-f]:/ && n { k = 0 }
        END { print n + 0 }')
    if [ "$KEYLEN" -gt 0 ]; then
        KEY=$(awk -v n="$KEYLEN" 'BEGIN { for (i = 0; i < n; i++) printf "%s%s", (i ? ":" : ""), (i % 2 ? "5a" : "6d") }')
        if try "symmetric Toeplitz key (6d:5a x $((KEYLEN / 2)))" ethtool -X "$IFACE" hkey "$KEY" hfunc toeplitz \
            || try "symmetric Toeplitz key without hfunc" ethtool -X "$IFACE" hkey "$KEY"; then
            SYMMETRIC=1
        fi
    else
        warn "$IFACE exposes no RSS key: cannot make RSS symmetric"
    fi
fi
if [ "$QUEUES" -gt 1 ] 2>/dev/null; then
    try "indirection table spread over $QUEUES queues" ethtool -X "$IFACE" equal "$QUEUES"
    for proto in tcp4 udp4 tcp6 udp6; do
        try "RSS on IPs and ports for $proto" ethtool -N "$IFACE" rx-flow-hash "$proto" sdfn
    done
    if [ "$SYMMETRIC" = 0 ]; then
        warn "RSS is NOT symmetric: the two directions of a flow may reach different workers; use one queue or a NIC with a programmable key"
    fi
fi

# --- 4. offloads --------------------------------------------------------------
# One feature per call: drivers refuse the whole call if one bit is fixed.
for feature in gro lro tso gso rx-gro-hw rx-gro-list rxvlan; do
    state=$(ethtool -k "$IFACE" 2>/dev/null | awk -v f="$feature" '
        BEGIN { n["gro"] = "generic-receive-offload"; n["lro"] = "large-receive-offload";
                n["tso"] = "tcp-segmentation-offload"; n["gso"] = "generic-segmentation-offload";
                n["rxvlan"] = "rx-vlan-offload" }
        { name = (f in n) ? n[f] : f }
        $1 == name ":" { print $2, $3; exit }')
    case "$state" in
        off*) say "ok: $feature already off" ;;
        "on [fixed]") warn "$feature is on and fixed by the driver" ;;
        '') say "ok: $feature not offered by the driver" ;;
        *) try "$feature off" ethtool -K "$IFACE" "$feature" off ;;
    esac
done

# --- 5. IRQ affinity ----------------------------------------------------------
core_of() { # queue index -> core from CORES (default: the index itself)
    if [ -z "$CORES" ]; then echo "$1"; return; fi
    echo "$CORES" | awk -F, -v i="$1" '{ c = $(i + 1); print (c == "" ? "" : c) }'
}
IRQS=""
if [ -d "/sys/class/net/$IFACE/device/msi_irqs" ]; then
    IRQS=$(ls "/sys/class/net/$IFACE/device/msi_irqs" | sort -n)
fi
if [ -z "$IRQS" ]; then
    warn "$IFACE has no MSI interrupts (virtual device?): no IRQ affinity to set"
else
    if pgrep -x irqbalance >/dev/null 2>&1; then
        warn "irqbalance is running and will move these IRQs back: stop it or ban them (IRQBALANCE_BANNED_CPULIST)"
    fi
    for irq in $IRQS; do
        name=$(awk -v irq="$irq:" '$1 == irq { print $NF }' /proc/interrupts)
        # RX queue IRQs by driver: eth1-TxRx-3 (ixgbe, i40e, ice, bnxt),
        # eth1-rx-3 (igb with split IRQs), virtio0-input.3, mlx5_comp3@pci...
        # Others (link/admin, TX-only) are left alone.
        case "$name" in
            *TxRx-[0-9]* | *[Rr][Xx]-[0-9]* | *input.[0-9]* | *comp[0-9]* | *comp-[0-9]*) ;;
            *) continue ;;
        esac
        q=$(echo "${name%%@*}" | sed -n 's/^.*[^0-9]\([0-9][0-9]*\)$/\1/p')
        [ -n "$q" ] && [ "$q" -lt "$QUEUES" ] || continue
        core=$(core_of "$q")
        if [ -z "$core" ]; then
            warn "no core given for queue $q (CORES=$CORES)"
        else
            try "IRQ $irq ($name) -> core $core" sh -c "echo $core > /proc/irq/$irq/smp_affinity_list"
        fi
    done
fi

# --- 6. memlock ---------------------------------------------------------------
MEMLOCK=$(ulimit -l)
say "memlock limit of this shell: $MEMLOCK (KiB). The daemon needs the UMEM size locked:"
say "  LimitMEMLOCK=infinity in xdprobe.service (or CAP_IPC_LOCK); check-config prints the size."

if [ "$WARNINGS" -gt 0 ]; then
    say "done with $WARNINGS warning(s)"
else
    say "done"
fi
exit 0
