#!/usr/bin/env bash
# build.sh — the Debian package (`make deb`), with cargo-deb: the probe
# binary, the systemd units, the conffiles, the maintainer scripts (all
# listed in Cargo.toml, [package.metadata.deb]), and the man pages and
# shell completions, which the binary being packaged writes from its own
# clap definitions (`xdprobe generate`, hidden), so they always match it.
#
#   deploy/deb/build.sh                 build the release binary, package it
#   deploy/deb/build.sh --binary FILE   package FILE instead (a binary built
#                                       elsewhere: another profile, a test's)
#   --out DIR                           where the .deb goes (target/debian)
#
# Prints the path of the .deb on its last line.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
binary=""
out="$root/target/debian"
while (($#)); do
  case "$1" in
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    *) echo "usage: $0 [--binary FILE] [--out DIR]" >&2; exit 2 ;;
  esac
done
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo-deb >/dev/null || { echo "cargo-deb missing: run deploy/bootstrap.sh" >&2; exit 1; }

if [ -z "$binary" ]; then
  cargo build --release --locked -p xdprobe --bin xdprobe
  target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  binary="$target_dir/release/xdprobe"
else
  # cargo-deb takes built binaries from $CARGO_TARGET_DIR/release/: a
  # scratch one holding FILE under that name, so nothing is rebuilt.
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  mkdir "$stage/release"
  cp "$binary" "$stage/release/xdprobe"
  export CARGO_TARGET_DIR="$stage"
fi

# Generated assets, at the paths Cargo.toml's asset list names.
assets="$root/target/deb-assets"
rm -rf "$assets"
"$binary" generate man "$assets/man" >/dev/null
"$binary" generate completions "$assets/completions" >/dev/null

mkdir -p "$out"
# --strip: the release profile keeps line tables (debug = 1) for
# benchmarks; the package ships without them.
cargo deb -p xdprobe --no-build --strip -o "$out" | tail -n 1
