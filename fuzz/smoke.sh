#!/usr/bin/env bash
# Bounded fuzz run of every target, for CI and for a quick local check.
#
#   fuzz/smoke.sh                          # 60 s in all, split across the targets
#   FUZZ_SECONDS=600 fuzz/smoke.sh
#   FUZZ_TARGETS="pipeline" fuzz/smoke.sh  # some targets only
#
# Installs cargo-fuzz if missing (needs the nightly toolchain, which the
# machine image provides), seeds each target's corpus from the test
# captures (`seeds.sh`), and fails on any crash, panic (overflow checks are
# on), leak or per-input timeout. The long run is `long.sh` (README.md).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
secs="${FUZZ_SECONDS:-60}"
targets=(${FUZZ_TARGETS:-parse_packet pipeline config_text l7_trackers l7_parsers})
each=$(( secs / ${#targets[@]} ))
(( each >= 1 )) || each=1

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "smoke.sh: the nightly toolchain is required (cargo +nightly fuzz)" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "smoke.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cargo +nightly fuzz build
mkdir -p "$here/logs"
for t in "${targets[@]}"; do
    "$here/seeds.sh" "$t"
    log="$here/logs/$t.smoke.log"
    # -timeout: one input taking a second means an unbounded loop.
    if ! cargo +nightly fuzz run "$t" "$here/corpus/$t" -- \
        -max_total_time="$each" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "smoke.sh: $t: finding (or failure); input in fuzz/artifacts/$t, log $log" >&2
        exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "smoke.sh: $t ran ${each}s, ${execs:-?} executions, no finding"
done
