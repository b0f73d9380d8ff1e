//! Bringing both directions of a flow to the worker that owns it
//! (`crate::steer`), one hand-off per source: `queue` and `merge` for
//! AF_XDP queues (a ring of frames from every worker to every other, merged
//! in timestamp order), `file` for capture files (a ring of frame batches
//! per worker, filled by whichever worker holds the reader).

pub mod file;
pub mod merge;
pub mod queue;
