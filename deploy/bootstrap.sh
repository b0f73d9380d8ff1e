#!/usr/bin/env bash
# bootstrap.sh — everything a fresh Debian 12 machine needs to build and test
# xdprobe, and nothing more. Idempotent and fast when all is there (each step
# checks first). Needs root for apt; run from anywhere.
#
#   apt:   llvm-22-dev + libpolly-22-dev (bpf-linker links against LLVM;
#          Polly in case llvm-config lists it), clang, libelf-dev,
#          zlib1g-dev, m4, libpcap-dev (xsk-rs builds libxdp/libbpf), bpftool;
#          tshark (the tests' oracle), nfdump, pmacct, softflowd (real
#          collectors and peers), tcpdump, curl, openssl, ethtool,
#          iproute2, procps (the capture rig, tests/live_support/rig.rs);
#          the package test (tests/package_deb.rs): binutils (strip),
#          adduser, init-system-helpers, man-db, systemd (systemd-analyze
#          verify and its syscall groups), util-linux (setpriv),
#          linux-libc-dev (syscall numbers for the test's seccomp filter),
#          zsh and fish (completion syntax);
#          prometheus (the real scraper of tests/prometheus_scrape.rs, and
#          promtool), installed without starting its service;
#          dnsmasq-base, bind9-dnsutils (dig), python3-venv (the L7 tests'
#          DNS server and client, and the venv below).
#   pypi:  aioquic in a venv (the L7 tests' QUIC client and server,
#          tests/l7_support/traffic.py).
#   rust:  the nightly toolchain's rust-src (the eBPF crate is built with
#          -Z build-std=core), bpf-linker, cargo-fuzz (bounded fuzz run),
#          cargo-deb (`make deb`).
set -euo pipefail

log() { printf '[bootstrap] %s\n' "$*" >&2; }

APT_PKGS=(llvm-22-dev libpolly-22-dev clang libelf-dev zlib1g-dev m4 libpcap-dev bpftool pkg-config
          tshark nfdump pmacct softflowd tcpdump curl openssl ethtool
          iproute2 procps
          binutils adduser init-system-helpers man-db systemd util-linux linux-libc-dev
          zsh fish
          prometheus
          dnsmasq-base bind9-dnsutils python3-venv)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  [ "$(id -u)" = 0 ] || { log "need root for apt-get"; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer no.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  # Packages with a service (prometheus) must not start it here: without a
  # policy-rc.d (container images ship one), deny starts for this install.
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

export PATH="$HOME/.cargo/bin:$PATH"
command -v rustup >/dev/null || { log "rustup not found: this machine kind ships it"; exit 1; }

if ! rustup toolchain list | grep -q '^nightly'; then
  log "rustup toolchain install nightly"
  rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
  log "rustup component add rust-src --toolchain nightly"
  rustup component add rust-src --toolchain nightly
fi

if ! command -v bpf-linker >/dev/null; then
  log "cargo install bpf-linker (against llvm-22)"
  LLVM_PREFIX=/usr/lib/llvm-22 cargo install --locked bpf-linker --version 0.13.0 \
    --no-default-features --features llvm-22
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  log "cargo install cargo-fuzz"
  cargo +nightly install --locked cargo-fuzz
fi

if ! command -v cargo-deb >/dev/null; then
  log "cargo install cargo-deb"
  cargo install --locked cargo-deb --version 3.8.0
fi

# aioquic from PyPI, in a venv of its own (Debian's python3 refuses pip
# installs into the system, PEP 668); tests/l7_support finds it here.
VENV="${XDG_DATA_HOME:-$HOME/.local/share}/xdprobe/venv"
if ! "$VENV/bin/python3" -c 'import aioquic' 2>/dev/null; then
  log "python3 -m venv $VENV && pip install aioquic==1.7.2"
  python3 -m venv "$VENV"
  "$VENV/bin/python3" -m pip install -q aioquic==1.7.2
fi

# XDP/AF_XDP need locked memory; the integration tests run as root.
ulimit -l unlimited 2>/dev/null || true
log "ok"
