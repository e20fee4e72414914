//! The suite's data (`clients/conformance/scenarios.json`) and what this runner does with each
//! scenario: which runs it makes (one per listed transport the Rust client has, per flavor), and
//! which it reports as not applicable, with the reason.
//!
//! Invariants: a `format` other than 1 and a `kind` this runner does not know are errors, never
//! skips; a run is either made or listed as not applicable by [`plan`], nothing else.

use serde_json::Value;
use std::path::PathBuf;

/// The transports of the Rust client: gRPC only (it has no HTTP/JSON transport).
pub const TRANSPORTS: &[&str] = &["grpc"];

/// Every transport the suite names, and why this client lacks the ones it lacks.
const ABSENT_TRANSPORTS: &[(&str, &str)] = &[(
    "http",
    "the Rust client has no HTTP/JSON transport (gRPC only)",
)];

/// The kinds this runner knows. Those without nodes run once, with no transport.
pub const KINDS: &[&str] = &[
    "unique_concurrent",
    "batches",
    "give_back",
    "failover",
    "error",
    "info",
    "error_table",
    "decode_offline",
];

/// Kinds that start no node.
const NO_NODES: &[&str] = &["error_table", "decode_offline"];

/// Kinds run both with `Client` (async tasks) and `BlockingClient` (threads), as the README asks
/// of a client that has both; the others with `Client`.
const BOTH_FLAVORS: &[&str] = &["unique_concurrent", "give_back", "failover", "error"];

/// The calls of the suite the Rust client has no API for, and why.
const ABSENT_OPS: &[(&str, &str)] = &[
    (
        "info",
        "the Rust client has no call reading a namespace's settings and state (info)",
    ),
    (
        "decode",
        "the Rust client has no call asking a node to decode an id (decode)",
    ),
];

/// `clients/conformance` of this repository.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../clients/conformance")
}

/// The suite's data, its format checked.
pub fn load() -> Result<Value, String> {
    let path = dir().join("scenarios.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    match data.get("format").and_then(Value::as_u64) {
        Some(1) => Ok(data),
        other => Err(format!(
            "scenarios.json has format {other:?}; this runner knows format 1 only"
        )),
    }
}

/// A client flavor: the async `Client` with tasks, or `BlockingClient` with threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `Client`, workers as tokio tasks.
    Async,
    /// `BlockingClient`, workers as threads.
    Blocking,
}

/// One run of a scenario.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    /// The scenario.
    pub scenario: &'a Value,
    /// `None` for kinds that start no node.
    pub transport: Option<&'a str>,
    /// The client flavor.
    pub flavor: Flavor,
}

impl Run<'_> {
    /// The run's name: the scenario's, its kind, transport and flavor.
    pub fn label(&self) -> String {
        label(self.scenario, self.transport, Some(self.flavor))
    }
}

/// What this runner makes of a scenario: its runs, and the (label, reason) of each run it cannot
/// make with the Rust client.
pub struct Plan<'a> {
    /// Runs to make.
    pub runs: Vec<Run<'a>>,
    /// Runs listed by the scenario that this client cannot make: label, reason.
    pub not_applicable: Vec<(String, &'static str)>,
}

fn label(s: &Value, transport: Option<&str>, flavor: Option<Flavor>) -> String {
    let name = s.get("name").and_then(Value::as_str).unwrap_or("(unnamed)");
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("(no kind)");
    let mut parts = vec![kind.to_owned()];
    parts.extend(transport.map(str::to_owned));
    parts.extend(flavor.map(|f| match f {
        Flavor::Async => "async".to_owned(),
        Flavor::Blocking => "blocking".to_owned(),
    }));
    format!("{name} [{}]", parts.join(", "))
}

/// The ops a scenario calls (`call` and `call.after`), for the `error` kind; `info` for `info`.
fn ops(s: &Value) -> Vec<&str> {
    if s.get("kind").and_then(Value::as_str) == Some("info") {
        return vec!["info"];
    }
    let Some(call) = s.get("call") else {
        return Vec::new();
    };
    let after = call.get("after").and_then(Value::as_array);
    std::iter::once(call)
        .chain(after.into_iter().flatten())
        .filter_map(|c| c.get("op").and_then(Value::as_str))
        .collect()
}

/// The runs of scenario `s`; an error for an unknown kind or transport.
pub fn plan(s: &Value) -> Result<Plan<'_>, String> {
    let kind = s
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{}: no kind", label(s, None, None)))?;
    if !KINDS.contains(&kind) {
        return Err(format!(
            "{}: unknown scenario kind {kind:?}: this runner cannot run it",
            label(s, None, None)
        ));
    }
    let flavors: &[Flavor] = if BOTH_FLAVORS.contains(&kind) {
        &[Flavor::Async, Flavor::Blocking]
    } else {
        &[Flavor::Async]
    };
    let mut plan = Plan {
        runs: Vec::new(),
        not_applicable: Vec::new(),
    };
    if NO_NODES.contains(&kind) {
        for &flavor in flavors {
            plan.runs.push(Run {
                scenario: s,
                transport: None,
                flavor,
            });
        }
        return Ok(plan);
    }
    let transports: Vec<&str> = match s.get("transports") {
        None => vec!["grpc"],
        Some(list) => list
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .ok_or_else(|| format!("{}: transports is not a list", label(s, None, None)))?,
    };
    let absent_op = ops(s).into_iter().find_map(|op| {
        ABSENT_OPS
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, why)| *why)
    });
    for transport in transports {
        let absent_transport = ABSENT_TRANSPORTS
            .iter()
            .find(|(t, _)| *t == transport)
            .map(|(_, why)| *why);
        if !TRANSPORTS.contains(&transport) && absent_transport.is_none() {
            return Err(format!(
                "{}: unknown transport {transport:?}",
                label(s, None, None)
            ));
        }
        if let Some(why) = absent_transport.or(absent_op) {
            plan.not_applicable
                .push((label(s, Some(transport), None), why));
            continue;
        }
        for &flavor in flavors {
            plan.runs.push(Run {
                scenario: s,
                transport: Some(transport),
                flavor,
            });
        }
    }
    Ok(plan)
}

/// Typed reads of a scenario's keys, failing with the key's name.
pub trait Keys {
    /// The string at `key`.
    fn str_at(&self, key: &str) -> Result<&str, String>;
    /// The unsigned integer at `key`.
    fn u64_at(&self, key: &str) -> Result<u64, String>;
}

impl Keys for Value {
    fn str_at(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("key {key:?} is missing or not a string"))
    }

    fn u64_at(&self, key: &str) -> Result<u64, String> {
        self.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("key {key:?} is missing or not an unsigned integer"))
    }
}
