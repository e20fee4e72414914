//! The conformance runner's kit (tests/conformance.rs): the suite's data and plan
//! ([`suite`]), live topologies of `idmint serve` processes ([`topology`]), the client in both
//! flavors with the shared checks ([`client`]), and offline decoding ([`decode`]).

pub mod client;
pub mod decode;
pub mod suite;
pub mod topology;
