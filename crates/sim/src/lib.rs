//! A deterministic simulation of idmint, in two worlds. [`hosts`], the production world: real
//! nodes (`idmint_node::Node`) on paused tokio runtimes over the in-memory authority behind a
//! seeded fault wrapper, crashed, stopped, restarted and operated on, under one checker of every
//! answer. [`world`], the model world: the real buffer, block gate, snowflake generator and
//! in-memory authority, driven step by step with the node's supply, worker, strict order, owned
//! shards and tiers modelled, through a faulty network, crashes, pauses, clock steps, slow
//! storage and operator actions, under a checker of the uniqueness invariants. See
//! docs/simulation.md.
//!
//! A seed names a run exactly: [`run`] (or [`hosts::run`]) twice with one seed gives the same
//! trace hash.

#[path = "../../node/src/block_gate.rs"]
#[allow(dead_code, missing_docs)]
pub mod block_gate;
pub mod bugs;
pub mod checker;
pub mod clock;
pub mod hosts;
#[path = "../../testkit/src/linearizable.rs"]
pub mod linearizable;
pub mod node;
pub mod rng;
pub mod shards;
pub mod store;
pub mod strict;
pub mod world;

pub use bugs::{Bug, Bugs, ALL};
pub use world::{run, Outcome};

/// Steps per seed.
pub const STEPS: u64 = 1500;

/// Runs `seeds` from `first` with `bugs`; the first failing outcome, or `None`.
pub fn first_failure(first: u64, seeds: u64, bugs: Bugs) -> Option<Outcome> {
    (first..first + seeds)
        .map(|seed| run(seed, bugs, STEPS))
        .find(|o| o.violation.is_some())
}
