# The two commands of the README's quick start, the package, and the pieces
# they run.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test bootstrap lint unit fuzz bench deb

# The probe's main job on a built-in default: no NIC or collector needed.
demo: bootstrap
	cargo build --release --quiet -p xdprobe --bins
	target/release/xdprobe demo

# Every test: format, lints, a bounded fuzz run (60 s split across the fuzz
# targets, fuzz/README.md), and unit + integration tests (privileged ones
# need root); the last line sums them up.
test: bootstrap lint fuzz unit

bootstrap:
	@deploy/bootstrap.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

unit:
	mkdir -p target
	# Every test binary runs even after a failure, so one run shows every
	# failing test; the summary line comes last either way.
	set -o pipefail; cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee target/test.log; rc=$$?; \
	awk '/^test result:/ { p += $$4; f += $$6; i += $$8 } \
	  END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log; \
	exit $$rc

fuzz:
	FUZZ_SECONDS=60 fuzz/smoke.sh

# The Debian package, target/debian/xdprobe_VERSION_ARCH.deb: the release
# binary, systemd units, conffiles, man pages, completions (deploy/deb/).
deb: bootstrap
	deploy/deb/build.sh

# Not part of `make test`: throughput is measured, not asserted (BENCHMARKS.md).
bench: bootstrap
	benches/compare.sh
