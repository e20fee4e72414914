//! idmint-core: the sans-IO heart of idmint.
//!
//! Everything that decides what an id is lives here, with no sockets, no threads of its own,
//! no sleeping and no reading of the operating system's clock outside [`clock::SystemClock`]:
//!
//! - [`layout`]: validated bit layouts for 64-bit time-ordered ids (twitter, instagram,
//!   sonyflake, discord, js53, custom), with compose and decode.
//! - [`snowflake`]: a lock-free snowflake generator that never issues a timestamp below one it
//!   issued before, across wall-clock steps and restarts.
//! - [`lease_window`]: the rules tying a generator to a worker lease (start above the floor,
//!   the limit a renewal allows, the floor a release records, the layout lock's text).
//! - [`instagram`]: Instagram's shard-embedded ids (`nextval() % 1024`).
//! - [`keys`]: routing a row from its key: composite `shard-local` keys, residue classes of
//!   step/offset sequences, an id's shard and a key's shard.
//! - [`block`]: block arithmetic for sequences (start, step, offset, 32/64-bit widths).
//! - [`buffer`]: the leased-block buffer state machine and its demand-based sizing.
//! - [`uuid7`] and [`ulid`]: monotonic, thread-safe 128-bit time-ordered ids.
//! - [`clock`]: the `Clock` trait, the system clock, the generators' default [`CoarseClock`]
//!   (cached readings, one atomic load) and a manual clock for tests.
//! - [`namespace`]: validated namespace names.
//! - [`backoff`]: exponential backoff with jitter for retry loops (the caller sleeps).
//!
//! It starts no thread of its own, except two clock-refreshing threads: [`clock::CoarseClock`]'s,
//! one per process, started by the first `CoarseClock::new()` (which the generators' `Default`
//! impls and default type parameter use) and running until the process exits; and
//! [`clock::TickClock`]'s when asked to.
//!
//! What it does not do: durability (that is the authority's, in `idmint-store`), networking
//! (`idmint-node`), or waiting (a generator that must wait says for how long and returns).

pub mod backoff;
pub mod block;
pub mod clock;
pub mod namespace;
mod sync;

pub use backoff::Backoff;
pub use block::{Block, BlockError, SequenceSpec, SpecError, Width};
pub use clock::{Clock, CoarseClock, ManualClock, SystemClock, TickClock};
pub use namespace::{NamespaceName, NamespaceNameError};
pub mod layout;
pub mod lease_window;
pub mod snowflake;
pub use layout::{
    ComposeError, DecodeError, Decoded, FieldOrder, Layout, LayoutError, LayoutSpec, NodeField,
    Parts,
};
pub use snowflake::{ClockCheck, GeneratorError, NextIdError, SnowflakeGenerator};
pub mod instagram;
pub mod keys;
pub use keys::{CompositeKey, CompositeKeyError};
mod mono128;
pub mod ulid;
pub mod uuid7;
pub use mono128::ParseIdError;
pub use ulid::{Ulid, UlidGenerator};
pub use uuid7::{Uuid7, Uuid7Generator};
pub mod buffer;
pub mod planted;
pub use buffer::{
    Buffer, BufferConfig, BufferConfigError, BufferError, BufferPolicy, BufferStats, SharedBlock,
    Sizing,
};
