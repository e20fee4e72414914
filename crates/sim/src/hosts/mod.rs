//! The production world: hosts that run the real node (`idmint_node::Node`), each with its own
//! data directory, on current-thread tokio runtimes on paused time, over the real in-memory
//! authority behind a seeded fault wrapper; crashes (the runtime dropped), clean stops (the
//! node's shutdown), restarts on the same data directory, and the operator (rebase, retire, a
//! data directory copied onto another host); one checker over every answer.
//! See docs/simulation.md, "The production world".
//!
//! Modules: [`world`] (the step loop, what the seed controls), [`host`] (one host and its
//! runs), [`authority`] (the fault wrapper), [`check`] (the checker), [`trace`] (the
//! interleaving in words and its hash).

pub mod authority;
pub mod check;
pub mod host;
pub mod trace;
pub mod world;

pub use world::{run, run_traced, Report, SetupError, HOSTS, STEPS};

use crate::bugs::Bug;

/// The bugs planted in the code a node runs (`idmint_core::planted`: in `idmint-node`,
/// `idmint-store` and `idmint-core` with their `planted` features), which the production world
/// must catch.
pub const BUGS: &[Bug] = &[
    Bug {
        name: "giveback-unknown-kept",
        bit: idmint_core::planted::GIVEBACK_UNKNOWN_KEPT,
        place: "node Supply::give_back",
        what: "a give-back with no known outcome read as refused: the tail is kept, parked and served again",
    },
    Bug {
        name: "kept-without-claim",
        bit: idmint_core::planted::KEPT_WITHOUT_CLAIM,
        place: "node node/kept.rs (claim_kept)",
        what: "blocks kept at the last clean stop adopted without a claim through the store",
    },
    Bug {
        name: "giveback-no-cas",
        bit: idmint_core::planted::GIVEBACK_NO_CAS,
        place: "store ops::give_back (MemoryAuthority)",
        what: "TiDB#46444: a give-back written blind, lowering the watermark below later grants",
    },
    Bug {
        name: "putback-below-floor",
        bit: idmint_core::planted::PUTBACK_BELOW_FLOOR,
        place: "core Buffer::put_back (the node's supply)",
        what: "a failed request's put-back ignores the rebase floor",
    },
    Bug {
        name: "burn-uncounted",
        bit: idmint_core::planted::BURN_UNCOUNTED,
        place: "core Buffer::put_back (the node's supply)",
        what: "a refused put-back not counted as burned",
    },
];

/// Whether this build can plant the node's bugs.
pub const PLANTED: bool = cfg!(feature = "planted");
