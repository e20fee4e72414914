//! Atomics used by the lock-free generators, swapped for loom's under `--cfg loom` so the
//! model checker can explore every interleaving of the hot paths.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
