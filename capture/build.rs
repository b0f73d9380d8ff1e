//! Builds the XDP program (`xdp-prog/`) for `bpfel-unknown-none` with
//! `aya_build` (nightly toolchain, `-Z build-std=core`, bpf-linker on PATH)
//! and leaves the object in `OUT_DIR/xdp-prog`, where `src/xdp.rs` embeds
//! it with `aya::include_bytes_aligned!`.
//!
//! `AYA_BUILD_SKIP=1` skips the eBPF build (for machines without the
//! nightly toolchain or bpf-linker): an empty placeholder object is written
//! instead, and `xdprobe run` then fails at start with a clear message.

use std::{env, fs, path::PathBuf};

fn main() -> aya_build::Result<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let root = manifest.parent().expect("capture/ lives in the workspace");
    let prog_dir = root.join("xdp-prog");
    let common_dir = root.join("xdprobe-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    println!("cargo:rerun-if-changed=build.rs");

    let object = out_dir.join("xdp-prog");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        // aya_build prints its own warning; the placeholder keeps
        // `include_bytes_aligned!` compiling.
        fs::write(&object, b"")?;
    }

    // xdp-prog is its own workspace (it only builds for the BPF target), so
    // the nested `cargo build --package xdp-prog` must run from its folder.
    env::set_current_dir(&prog_dir)?;
    let prog_dir_str = prog_dir.to_string_lossy().into_owned();
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "xdp-prog",
            root_dir: &prog_dir_str,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
