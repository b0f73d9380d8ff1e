//! `xdprobe generate man|completions DIR` (hidden): the man pages and shell
//! completions the Debian package installs, written from the same clap
//! definitions that parse the command line, by the binary being packaged
//! (`deploy/deb/build.sh`). Nothing is checked in: a page cannot describe
//! an option the binary does not have.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Command;
use clap_complete::Shell;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(clap::Subcommand, Debug)]
pub enum What {
    /// Section-1 man pages: `xdprobe.1` and one `xdprobe-SUBCOMMAND.1` per
    /// visible subcommand (nested ones too: `xdprobe-trace-echo.1`).
    Man {
        /// Directory to write them into (created if missing).
        dir: PathBuf,
    },
    /// Completion scripts, named as each shell's vendor directory expects:
    /// `xdprobe.bash`, `_xdprobe` (zsh), `xdprobe.fish`.
    Completions {
        /// Directory to write them into (created if missing).
        dir: PathBuf,
    },
}

/// `cli` is the whole command line (`Cli::command()` in main.rs).
pub fn run(a: GenerateArgs, cli: Command) -> anyhow::Result<ExitCode> {
    let dir = match &a.what {
        What::Man { dir } | What::Completions { dir } => dir,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let written = match a.what {
        What::Man { dir } => man_pages(cli, &dir)?,
        What::Completions { dir } => completions(cli, &dir)?,
    };
    for p in written {
        println!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// One page per command, titled by its path as `man xdprobe-run` finds
/// it (clap's display name) with the synopsis as typed (`xdprobe run`);
/// hidden commands (this one) get none.
fn man_pages(cli: Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    clap_mangen::generate_to(cli, dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .collect();
    out.sort();
    Ok(out)
}

/// The scripts offer every visible subcommand: clap_complete would offer
/// hidden ones too (this one), so the tree is rebuilt without them.
fn completions(cli: Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let bin = cli.get_name().to_owned();
    let mut cli = without_hidden(&cli);
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let p = clap_complete::generate_to(shell, &mut cli, &bin, dir)
            .with_context(|| format!("{shell} completions into {}", dir.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// `cli` with its hidden subcommands left out (top level: the root has no
/// arguments of its own beyond the ones clap adds).
fn without_hidden(cli: &Command) -> Command {
    Command::new(env!("CARGO_BIN_NAME"))
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .about(cli.get_about().cloned().unwrap_or_default())
        .args(cli.get_arguments().cloned())
        .subcommands(cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}
