//! idmint-testkit: what the tests of idmint use to make real failures happen.
//!
//! - [`proxy::FaultProxy`]: a TCP proxy placed between a node and its backend that can pass
//!   traffic, add latency, stall, cut every connection, or drop the reply to a request that went
//!   through (an ambiguous commit).
//! - [`zookeeper::PrivateZookeeper`]: a private standalone ZooKeeper server per test.
//! - [`redis::PrivateRedis`]: a private `redis-server` per test (AOF, fsync on every write).
//! - [`postgres_tls::PrivatePostgres`]: a private PostgreSQL that accepts TLS only.
//! - [`etcd_tls::PrivateEtcdTls`]: a private etcd serving its clients over TLS only.
//! - [`certs::TestCerts`]: a CA and a server certificate made at test time, for TLS tests.
//! - [`netns::Lab`]: network namespaces joined by veth pairs and bridges, for real partitions
//!   between real processes (links cut and healed); needs root.
//! - [`postgres_lab::LabPostgres`]: a private plain PostgreSQL in a lab host.
//! - [`linearizable::check`]: a linearizability checker of id histories (`order = "strict"`).
//! - [`wait`]: polling a condition with a deadline ([`wait::until`] and its async and
//!   value-returning variants), so tests wait for what happened instead of sleeping.
//!
//! Faults come from this proxy and from killing real processes, never from mocks. Nothing here
//! is used outside tests.

pub mod certs;
pub mod etcd;
pub mod etcd_tls;
pub mod linearizable;
pub mod mysql;
pub mod netns;
pub mod postgres;
pub mod postgres_lab;
pub mod postgres_tls;
pub mod proxy;
pub mod redis;
pub mod wait;
pub mod zookeeper;
