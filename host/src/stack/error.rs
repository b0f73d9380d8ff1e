//! What can go wrong checking, loading and attaching the stack-latency
//! programs: shared by the hook resolution (`hookset`), the attach
//! mechanics (`links`) and the probe that drives both.

use aya::programs::ProgramError;

use crate::kernel::offsets;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("the host tracing programs are not in this binary (built with AYA_BUILD_SKIP=1)")]
    NotBuilt,
    #[error("host.hooks.{layer}: {hook}: {reason}")]
    Hook {
        layer: &'static str,
        hook: String,
        reason: String,
    },
    #[error("host.hooks.{layer}: at most {max} hooks")]
    TooManyHooks { layer: &'static str, max: usize },
    #[error("{0}")]
    Offsets(#[from] offsets::OffsetError),
    #[error("at most {max} {what} in the in-kernel filter")]
    FilterTooLong { what: &'static str, max: usize },
    #[error("loading the stack-latency programs")]
    Load(#[source] aya::EbpfError),
    #[error("program {name} ({hook})")]
    Program {
        name: &'static str,
        hook: String,
        #[source]
        source: ProgramError,
    },
    #[error("the object has no {0}")]
    Missing(&'static str),
    #[error("map {0}")]
    Map(&'static str, #[source] aya::maps::MapError),
}

impl ProbeError {
    /// True for errors about what the kernel or the config offers (exit
    /// code 2 at the command line), as opposed to failures while loading.
    pub fn is_setup_error(&self) -> bool {
        matches!(
            self,
            ProbeError::Hook { .. }
                | ProbeError::TooManyHooks { .. }
                | ProbeError::Offsets(_)
                | ProbeError::FilterTooLong { .. }
        )
    }
}
