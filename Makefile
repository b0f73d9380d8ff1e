# The two commands of the README's quick start, and the pieces they run.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test bootstrap lint unit fuzz bench

# The probe's main job on a built-in default: no NIC or collector needed.
demo: bootstrap
	cargo run --release --quiet -- demo

# Every test: format, lints, unit + integration (privileged ones need root),
# and a bounded fuzz run of the packet parser.
test: bootstrap lint unit fuzz

bootstrap:
	@deploy/bootstrap.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

unit:
	cargo test --workspace --all-targets

fuzz:
	FUZZ_SECONDS=60 fuzz/smoke.sh

# Not part of `make test`: throughput is measured, not asserted (BENCHMARKS.md).
bench: bootstrap
	benches/compare.sh
