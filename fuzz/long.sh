#!/usr/bin/env bash
# The long fuzz run (not part of `make test`): a fixed number of executions
# per target, at the lowest CPU priority, without AddressSanitizer (the
# code under test is safe Rust; overflow checks and debug assertions stay
# on) so it is several times faster than the smoke run. Each target's
# corpus grows in fuzz/corpus/TARGET and is reused by later runs.
#
#   fuzz/long.sh                                 # the figures in README.md
#   RUNS_parse_packet=1000000 fuzz/long.sh parse_packet
#
# Prints one line per target: executions, corpus size, findings (crash,
# timeout or leak inputs in fuzz/artifacts/TARGET). Exit 1 on a finding.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
targets=("$@")
((${#targets[@]})) || targets=(parse_packet l7_trackers l7_parsers config_text pipeline)
declare -A runs=([parse_packet]=50000000 [l7_trackers]=30000000 [l7_parsers]=30000000 [config_text]=5000000 [pipeline]=15000000)
tdir="$here/target-long"
mkdir -p "$here/logs"
nice -n 19 cargo +nightly fuzz build -s none --target-dir "$tdir" >/dev/null
found=0
for t in "${targets[@]}"; do
    var="RUNS_$t"
    n="${!var:-${runs[$t]}}"
    "$here/seeds.sh" "$t" >/dev/null
    log="$here/logs/$t.long.log"
    start=$(date +%s)
    status=0
    nice -n 19 cargo +nightly fuzz run -s none --target-dir "$tdir" "$t" "$here/corpus/$t" -- \
        -runs="$n" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || status=$?
    secs=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    findings=$(find "$here/artifacts/$t" -type f 2>/dev/null | wc -l)
    corpus=$(find "$here/corpus/$t" -type f | wc -l)
    echo "long.sh: $t: ${execs:-?} executions in ${secs}s, corpus $corpus, findings $findings (exit $status)"
    if ((status != 0 || findings > 0)); then found=1; fi
done
exit "$found"
