#!/usr/bin/env bash
# Seeds fuzz/corpus/TARGET from the test captures and config files: the
# repository's own (assets/, tests/corpus/ when present, deploy/*.toml) and
# the optional shared corpus ($XDPROBE_SHARED/corpus, else ../shared/corpus).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$here/.."
target="$1"
out="$here/corpus/$target"
mkdir -p "$out"
command -v python3 >/dev/null || { echo "seeds.sh: no python3, corpus not seeded" >&2; exit 0; }
shared="${XDPROBE_SHARED:-$repo/../shared}/corpus"
shopt -s nullglob
case "$target" in
    config_text) files=("$repo"/deploy/*.toml "$repo"/config/tests/*.toml) ;;
    l7_trackers) files=() ;;
    l7_parsers) files=("$repo"/tests/corpus/*.pcap "$repo"/tests/corpus/*.pcapng
                       "$repo"/tests/corpus/l7/*.pcap "$repo"/tests/corpus/l7/*.pcapng) ;;
    *) files=("$repo"/assets/*.pcap "$repo"/tests/corpus/*.pcap "$repo"/tests/corpus/*.pcapng
              "$shared"/*.pcap "$shared"/*.pcapng) ;;
esac
python3 "$here/seeds.py" "$target" "$out" "${files[@]}"
