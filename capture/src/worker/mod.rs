//! Capture files on every core: the worker reading (whichever is idle, see
//! `spread`) walks the file and hands each frame to the worker that owns
//! its flow (the live path's symmetric address hash, `live::steer`), in
//! batches through one SPSC ring per worker (`ring`; the reader's turn
//! passes under a lock, so one producer at a time); each worker runs the
//! same batched `Worker::on_batch` as a single-core run and a live queue.
//! See `spread` for what a run with several workers guarantees about its
//! records.

pub mod ring;
pub mod spread;
