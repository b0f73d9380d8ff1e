#!/usr/bin/env bash
# Bounded fuzz run of the packet parser, for CI and for a quick local check.
#
#   fuzz/smoke.sh            # 60 s
#   FUZZ_SECONDS=600 fuzz/smoke.sh
#
# Installs cargo-fuzz if missing (needs the nightly toolchain, which the
# machine image provides), seeds the corpus with every frame of the test
# captures (tests/corpus, and $XDPROBE_SHARED/corpus when that is set),
# and fails on any crash, panic, leak or per-input timeout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
secs="${FUZZ_SECONDS:-60}"

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "smoke.sh: the nightly toolchain is required (cargo +nightly fuzz)" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "smoke.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

corpus="$here/corpus/parse_packet"
mkdir -p "$corpus"
if command -v python3 >/dev/null; then
    shopt -s nullglob
    captures=("$here"/../tests/corpus/*.pcap "$here"/../tests/corpus/*.pcapng)
    if [ -n "${XDPROBE_SHARED:-}" ]; then
        captures+=("$XDPROBE_SHARED"/corpus/*.pcap "$XDPROBE_SHARED"/corpus/*.pcapng)
    fi
    python3 "$here/seeds.py" "$corpus" "${captures[@]}"
fi

# -timeout: one input taking a second means an unbounded loop.
cargo +nightly fuzz run parse_packet "$corpus" -- \
    -max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1
echo "smoke.sh: parse_packet ran ${secs}s without a finding"
