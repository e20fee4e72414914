//! The client under test in both its flavors, made from a scenario's client options, and the
//! checks every kind shares: an id of the namespace's kind, ids increasing, ids distinct.
//!
//! Invariants: the async flavor runs its workers as tokio tasks of one multi-threaded runtime,
//! the blocking flavor as threads sharing one `BlockingClient`; an error of a call is returned
//! with the call named, never unwrapped.

use super::suite::{Flavor, Keys};
use super::topology::Topology;
use idmint_client::{
    BlockingClient, Client, ClientConfig, ClientError, ClientTls, CloseReport, Id, SystemClock,
};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

/// The client's waits: never what a run on a loaded machine runs into (a refused connection or a
/// node's error answers at once; a node's `authority_unavailable` within its 500 ms).
const WAIT: Duration = Duration::from_secs(30);

/// The settings of a scenario's `client` options for the topology's `transport` urls.
pub fn config(
    data: &Value,
    s: &Value,
    topology: &Topology,
    transport: &str,
) -> Result<ClientConfig, String> {
    let mut config = ClientConfig::new(topology.urls(transport)?);
    config.refill_wait = WAIT;
    config.op_timeout = WAIT;
    let options = s.get("client").cloned().unwrap_or(Value::Null);
    if let Some(name) = options.get("token").and_then(Value::as_str) {
        let token = data
            .get("tokens")
            .and_then(|t| t.get(name))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no token {name:?} in scenarios.json"))?;
        config = config.with_token(token);
    }
    let ca = match options.get("ca") {
        None => None,
        Some(Value::Bool(true)) => Some(topology.certs.join("ca.pem")),
        Some(Value::String(other)) if other == "other" => Some(topology.certs.join("other-ca.pem")),
        Some(other) => return Err(format!("client option ca = {other}: unknown")),
    };
    let cert = options.get("cert").and_then(Value::as_bool) == Some(true);
    let (pem, key) = (
        topology.certs.join("client.pem"),
        topology.certs.join("client.key"),
    );
    if ca.is_some() || cert {
        let identity = cert.then_some((pem.as_path(), key.as_path()));
        let tls = ClientTls::from_files(ca.as_deref(), identity)
            .map_err(|e| format!("client TLS settings: {e}"))?;
        config = config.with_tls(tls);
    }
    if let Some(block) = options.get("fixed_block") {
        let block = block.as_u64().ok_or("fixed_block is not a count")?;
        config = config
            .fixed_blocks(block)
            .map_err(|e| format!("fixed_block {block}: {e}"))?;
    }
    Ok(config)
}

/// A runtime for the async flavor (and for the runner's own gRPC reads).
pub fn runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| format!("starting a runtime: {e}"))
}

/// The client under test, of one flavor.
pub enum Under {
    /// `Client`, driven from `runtime`.
    Async {
        /// The client.
        client: Client,
        /// Its runtime.
        runtime: Arc<Runtime>,
    },
    /// `BlockingClient`.
    Blocking(BlockingClient),
}

impl Under {
    /// Connects a client of `flavor` with `config`.
    pub fn connect(flavor: Flavor, config: ClientConfig) -> Result<Under, ClientError> {
        let clock = Arc::new(SystemClock::new());
        match flavor {
            Flavor::Async => {
                let runtime =
                    Arc::new(runtime().map_err(|message| ClientError::Runtime { message })?);
                let client = runtime.block_on(Client::connect_with(config, clock))?;
                Ok(Under::Async { client, runtime })
            }
            Flavor::Blocking => Ok(Under::Blocking(BlockingClient::connect_with(
                config, clock,
            )?)),
        }
    }

    /// One id of `ns`.
    pub fn next(&self, ns: &str) -> Result<Id, ClientError> {
        match self {
            Under::Async { client, runtime } => runtime.block_on(client.next(ns)),
            Under::Blocking(client) => client.next(ns),
        }
    }

    /// `count` ids of `ns`.
    pub fn next_batch(&self, ns: &str, count: u64) -> Result<Vec<Id>, ClientError> {
        match self {
            Under::Async { client, runtime } => runtime.block_on(client.next_batch(ns, count)),
            Under::Blocking(client) => client.next_batch(ns, count),
        }
    }

    /// Closes the client.
    pub fn close(&self) -> Result<CloseReport, ClientError> {
        match self {
            Under::Async { client, runtime } => Ok(runtime.block_on(client.close())),
            Under::Blocking(client) => client.close(),
        }
    }

    /// `workers` concurrent workers (tasks or threads), each taking `each` ids of `ns` with
    /// `next`; each worker's ids in the order taken.
    pub fn workers(&self, ns: &str, workers: u64, each: u64) -> Result<Vec<Vec<Id>>, String> {
        let work = |n: u64, next: &dyn Fn() -> Result<Id, ClientError>| {
            (0..n)
                .map(|i| next().map_err(|e| format!("call {} of next({ns}): {e}", i + 1)))
                .collect::<Result<Vec<Id>, String>>()
        };
        match self {
            Under::Async { client, runtime } => runtime.block_on(async {
                let tasks: Vec<_> = (0..workers)
                    .map(|_| {
                        let (client, ns) = (client.clone(), ns.to_owned());
                        tokio::spawn(async move {
                            let mut ids = Vec::new();
                            for i in 0..each {
                                let id = client
                                    .next(&ns)
                                    .await
                                    .map_err(|e| format!("call {} of next({ns}): {e}", i + 1))?;
                                ids.push(id);
                            }
                            Ok::<_, String>(ids)
                        })
                    })
                    .collect();
                let mut lists = Vec::new();
                for (w, task) in tasks.into_iter().enumerate() {
                    let ids = task
                        .await
                        .map_err(|e| format!("worker {w} panicked: {e}"))?
                        .map_err(|e| format!("worker {w}: {e}"))?;
                    lists.push(ids);
                }
                Ok(lists)
            }),
            Under::Blocking(client) => std::thread::scope(|scope| {
                let threads: Vec<_> = (0..workers)
                    .map(|_| scope.spawn(|| work(each, &|| client.next(ns))))
                    .collect();
                threads
                    .into_iter()
                    .enumerate()
                    .map(|(w, t)| {
                        t.join()
                            .map_err(|_| format!("worker {w} panicked"))?
                            .map_err(|e| format!("worker {w}: {e}"))
                    })
                    .collect()
            }),
        }
    }
}

/// Fails with `what` unless `cond`.
pub fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// Each id after the one before it, as numbers (`Id::as_u128`).
pub fn increasing(ids: &[Id], what: &str) -> Result<(), String> {
    match ids.windows(2).find(|w| w[0].as_u128() >= w[1].as_u128()) {
        Some(w) => Err(format!("{what}: {} then {}", w[0], w[1])),
        None => Ok(()),
    }
}

/// No id twice.
pub fn distinct<'a>(ids: impl IntoIterator<Item = &'a Id>, what: &str) -> Result<(), String> {
    let mut seen = HashSet::new();
    for id in ids {
        if !seen.insert(id.as_u128()) {
            return Err(format!("{what}: {id} was handed out twice"));
        }
    }
    Ok(())
}

const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `id` is an id of namespace `ns`'s kind (scenarios.json `namespaces`).
pub fn of_kind(data: &Value, ns: &str, id: Id) -> Result<(), String> {
    let spec = data
        .get("namespaces")
        .and_then(|n| n.get(ns))
        .ok_or_else(|| format!("namespace {ns} is not described in scenarios.json"))?;
    let kind = spec.str_at("kind")?;
    let bad = || format!("{ns} ({kind}): {id:?} is not an id of its kind");
    match (kind, id) {
        ("sequence", Id::Sequence(v)) | ("snowflake", Id::Snowflake(v)) => {
            let max = spec
                .get("max")
                .and_then(Value::as_u64)
                .unwrap_or(i64::MAX as u64);
            ensure((1..=max.min(i64::MAX as u64)).contains(&v), bad)
        }
        ("uuid7", Id::Uuid7(u)) => {
            let bits = u.as_u128();
            ensure((bits >> 76) & 0xf == 7 && (bits >> 62) & 0b11 == 0b10, bad)
        }
        ("ulid", Id::Ulid(u)) => {
            let text = u.to_string();
            ensure(
                text.len() == 26 && text.chars().all(|c| CROCKFORD.contains(c)),
                bad,
            )
        }
        _ => Err(bad()),
    }
}
