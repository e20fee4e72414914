//! The planted bugs, by name. Those of the real crates exist only with the `planted` feature
//! and are switched with `idmint_core::planted::set`; the rest perturb the simulation's model
//! of the node and of the backends, and are read from [`Bugs`].

/// The real crates' bugs: the bits of `idmint_core::planted`.
pub(crate) use idmint_core::planted as real;
/// A give-back tail below the rebase floor is accepted (both of its guards removed).
pub use real::TAIL_BELOW_FLOOR;

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bug {
    /// Its name on the command line.
    pub name: &'static str,
    /// Its bit.
    pub bit: u64,
    /// Where the perturbed code lives.
    pub place: &'static str,
    /// What goes wrong.
    pub what: &'static str,
}

/// The node accepts a store reply again after a retry of the same request (the grant applied
/// twice).
pub const RETRY_TWICE: u64 = 1 << 16;
/// The snowflake limit is raised when the renewal is sent, not when its floor is durable.
pub const FLOOR_NOT_DURABLE: u64 = 1 << 17;
/// A node restarting after a crash ignores its lease's floor (the clock stepped back meanwhile).
pub const CLOCK_BACK_RESTART: u64 = 1 << 18;
/// A node accepts blocks of a wiped member re-created from 1 before it was repaired.
pub const STALE_MEMBER: u64 = 1 << 19;
/// The backend's reservation is read, then written blind after slow storage (Vitess#5590).
pub const TWO_PRIMARIES: u64 = 1 << 20;
/// Nodes keep their buffers across a restore of the store (YugabyteDB#16137).
pub const RESTORE_KEEPS_CACHE: u64 = 1 << 21;
/// A rebase raises the node's floor in memory but does not record it: a restart forgets it.
pub const REBASE_NOT_RECORDED: u64 = 1 << 22;

/// A give-back is applied as often as it is delivered (retried after an error, or duplicated):
/// the watermark's compare-and-swap passes again once a later grant moved it back to the
/// tail's end (ABA).
pub const GIVEBACK_RETRIED: u64 = 1 << 23;

/// The strict namespace's leader serves without checking its term's deadline: a paused or
/// cut-off leader goes on serving after its lease expired and another node took over.
pub const STRICT_SERVES_AFTER_EXPIRY: u64 = 1 << 24;
/// A new strict leader does not raise its floor to the watermark it read: it serves ids it
/// buffered before its term, below those an earlier leader served since.
pub const STRICT_NEW_LEADER_BELOW_WATERMARK: u64 = 1 << 25;

/// A new holder of a shard range ignores the range lease's floor: it neither waits for its
/// clock to reach it nor starts its generators above it.
pub const SHARD_TAKEOVER_BELOW_FLOOR: u64 = 1 << 26;
/// A shard range's holder skips its deadline check: a paused or cut-off holder answers its own
/// and forwarded requests after its lease could have expired and another node took it over.
pub const SHARD_SERVES_AFTER_EXPIRY: u64 = 1 << 27;

/// The bits of the real crates' bugs.
pub const REAL: u64 = (1 << 16) - 1;

/// Every planted bug.
pub const ALL: &[Bug] = &[
    Bug {
        name: "tail-below-floor",
        bit: real::TAIL_BELOW_FLOOR,
        place: "core Buffer::take_back_tail and the sim's Supply::advanced",
        what: "a give-back tail accepted below the rebase floor (the floor check and the lease end at a rebase both removed)",
    },
    Bug {
        name: "putback-below-floor",
        bit: real::PUTBACK_BELOW_FLOOR,
        place: "core Buffer::put_back",
        what: "a failed request's put-back ignores the floor",
    },
    Bug {
        name: "tail-after-take",
        bit: real::TAIL_AFTER_TAKE,
        place: "core Buffer::take_back_tail",
        what: "a give-back accepted after ids were taken after the lease",
    },
    Bug {
        name: "burn-uncounted",
        bit: real::BURN_UNCOUNTED,
        place: "core Buffer::put_back",
        what: "a refused put-back not counted as burned",
    },
    Bug {
        name: "wall-anchor",
        bit: real::WALL_ANCHOR,
        place: "core SnowflakeGenerator::new",
        what: "a new generator anchored to the wall clock, not the last issued timestamp",
    },
    Bug {
        name: "token-without-holder",
        bit: real::TOKEN_WITHOUT_HOLDER,
        place: "store lease::is_current",
        what: "fencing token compared without holder identity (wiped lease table: tokens restart)",
    },
    Bug {
        name: "giveback-no-cas",
        bit: real::GIVEBACK_NO_CAS,
        place: "store ops::give_back",
        what: "TiDB#46444: a former leader writes its cached maximum back, lowering the watermark",
    },
    Bug {
        name: "retry-twice",
        bit: RETRY_TWICE,
        place: "sim node model (cache-off path)",
        what: "a lost reply retried and the grant applied twice",
    },
    Bug {
        name: "floor-not-durable",
        bit: FLOOR_NOT_DURABLE,
        place: "sim node model (worker lease)",
        what: "a snowflake floor used before it is durable",
    },
    Bug {
        name: "clock-back-restart",
        bit: CLOCK_BACK_RESTART,
        place: "sim node model (worker lease)",
        what: "a clock stepped back across restart, the lease floor ignored",
    },
    Bug {
        name: "stale-member",
        bit: STALE_MEMBER,
        place: "sim node model (multi members)",
        what: "a stale multi member re-created from 1 is used",
    },
    Bug {
        name: "two-primaries",
        bit: TWO_PRIMARIES,
        place: "sim backend model",
        what: "Vitess#5590: two primaries hand out overlapping values",
    },
    Bug {
        name: "restore-keeps-cache",
        bit: RESTORE_KEEPS_CACHE,
        place: "sim node model",
        what: "YugabyteDB#16137: a restore that keeps the cache",
    },
    Bug {
        name: "rebase-not-recorded",
        bit: REBASE_NOT_RECORDED,
        place: "sim node model (node record)",
        what: "a rebase floor not made durable: a restart goes below it",
    },
    Bug {
        name: "giveback-retried",
        bit: GIVEBACK_RETRIED,
        place: "sim backend model",
        what: "a give-back applied twice (retried or duplicated): the compare-and-swap passes again after a later grant (ABA)",
    },
    Bug {
        name: "strict-serves-after-expiry",
        bit: STRICT_SERVES_AFTER_EXPIRY,
        place: "sim node model (strict leader)",
        what: "the strict leader skips its term's deadline check: it serves after its lease expired",
    },
    Bug {
        name: "strict-new-leader-below-watermark",
        bit: STRICT_NEW_LEADER_BELOW_WATERMARK,
        place: "sim node model (strict leader)",
        what: "a new strict leader does not raise its floor to the watermark: it serves a block buffered before its term",
    },
    Bug {
        name: "shard-takeover-below-floor",
        bit: SHARD_TAKEOVER_BELOW_FLOOR,
        place: "sim node model (shard range holder)",
        what: "a new holder of a shard range ignores the lease's floor: its generators start at its own clock, below ids an earlier holder issued",
    },
    Bug {
        name: "shard-serves-after-expiry",
        bit: SHARD_SERVES_AFTER_EXPIRY,
        place: "sim node model (shard range holder)",
        what: "a shard range's holder skips its deadline check: it issues after its lease expired, while another node holds the range",
    },
];

/// The bug named `name`.
pub fn by_name(name: &str) -> Option<&'static Bug> {
    ALL.iter().find(|b| b.name == name)
}

/// The bugs switched on for one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs(pub u64);

impl Bugs {
    /// Whether `bit` is on.
    pub fn on(self, bit: u64) -> bool {
        self.0 & bit != 0
    }

    /// Switches the real crates' share of them on for this thread (a no-op without the
    /// `planted` feature).
    pub fn install(self) {
        #[cfg(feature = "planted")]
        idmint_core::planted::set(self.0);
    }

    /// Whether this build can plant them: the real crates' bugs need the `planted` feature.
    pub fn available(self) -> bool {
        cfg!(feature = "planted") || self.0 & REAL == 0
    }
}
