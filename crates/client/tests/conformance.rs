//! The client conformance suite (clients/conformance/README.md) run against idmint-client: every
//! scenario of `scenarios.json`, once per listed transport this client has (gRPC; it has no
//! HTTP/JSON transport) and per flavor (`Client` with tasks, `BlockingClient` with threads, for
//! the kinds the README runs with both), each against a topology of live `idmint serve`
//! processes started for it from the templates (`$IDMINT_BIN`, else the `idmint` cargo built
//! next to this test: `cargo build --bin idmint` first).
//!
//! One test per scenario kind runs that kind's scenarios in order and names every failing run
//! (scenario, kind, transport, flavor). Runs this client cannot make (the HTTP transport, the
//! `info` and `decode` calls it lacks) are listed with their reason and counted by
//! `not_applicable_runs_are_listed`, never dropped silently. An unknown `kind`, transport or
//! `format` fails `every_scenario_is_known`.

mod conformance_support;

use conformance_support::client::{config, distinct, ensure, increasing, of_kind, runtime, Under};
use conformance_support::suite::{self, Flavor, Keys, Run};
use conformance_support::topology::Topology;
use idmint_client::{ClientError, GrpcCode, Id};
use serde_json::Value;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// A line on the test's stderr, not captured by the test harness (the list of runs made and
/// not applicable belongs in every run's output).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "conformance: {line}");
}

fn load() -> Value {
    suite::load().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs every scenario of `kind`; panics listing each failing run.
fn run_kind(kind: &str) {
    let data = load();
    let scenarios = data
        .get("scenarios")
        .and_then(Value::as_array)
        .expect("scenarios.json has scenarios");
    let mut failures = Vec::new();
    let mut made = 0;
    for s in scenarios {
        if s.get("kind").and_then(Value::as_str) != Some(kind) {
            continue;
        }
        let plan = suite::plan(s).unwrap_or_else(|e| panic!("{e}"));
        for (label, why) in &plan.not_applicable {
            say(&format!("n/a  {label}: {why}"));
        }
        for run in &plan.runs {
            made += 1;
            let started = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| run_one(&data, run)))
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_text(&*panic))));
            let took = started.elapsed().as_secs_f64();
            match result {
                Ok(()) => say(&format!("ok   {} ({took:.1} s)", run.label())),
                Err(why) => {
                    say(&format!("FAIL {} ({took:.1} s): {why}", run.label()));
                    failures.push(format!("{}: {why}", run.label()));
                }
            }
        }
    }
    assert!(made > 0, "no run of kind {kind} was made");
    assert!(
        failures.is_empty(),
        "{} of {made} runs of kind {kind} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

fn run_one(data: &Value, run: &Run<'_>) -> Result<(), String> {
    let s = run.scenario;
    let kind = s.str_at("kind")?;
    let Some(transport) = run.transport else {
        return match kind {
            "error_table" => error_table(data),
            "decode_offline" => conformance_support::decode::run_file(s.str_at("file")?),
            other => Err(format!(
                "kind {other} needs nodes and was given no transport"
            )),
        };
    };
    // Dropped at the end of this function, also on an error or a panic: the nodes stop.
    let mut topology = Topology::start(data, s.str_at("topology")?)?;
    let config = config(data, s, &topology, transport)?;
    let connect =
        || Under::connect(run.flavor, config.clone()).map_err(|e| format!("connecting: {e}"));
    match kind {
        "unique_concurrent" => unique_concurrent(data, s, &connect()?),
        "batches" => batches(data, s, &connect()?),
        "give_back" => give_back(s, &topology, run.flavor, &config),
        "failover" => failover(data, s, &connect()?, &mut topology),
        "error" => error(s, Under::connect(run.flavor, config.clone())),
        other => Err(format!("kind {other}: this client has no call for it")),
    }
}

fn unique_concurrent(data: &Value, s: &Value, client: &Under) -> Result<(), String> {
    let ns = s.str_at("namespace")?;
    let (workers, each) = (s.u64_at("workers")?, s.u64_at("ids_per_worker")?);
    let lists = client.workers(ns, workers, each);
    client.close().map_err(|e| format!("close: {e}"))?;
    let lists = lists?;
    for (w, ids) in lists.iter().enumerate() {
        increasing(ids, &format!("worker {w}"))?;
    }
    let total: usize = lists.iter().map(Vec::len).sum();
    ensure(total as u64 == workers * each, || {
        format!("{total} ids, want {}", workers * each)
    })?;
    distinct(lists.iter().flatten(), "all workers")?;
    lists
        .iter()
        .flatten()
        .try_for_each(|&id| of_kind(data, ns, id))
}

fn batches(data: &Value, s: &Value, client: &Under) -> Result<(), String> {
    let ns = s.str_at("namespace")?;
    let (size, count) = (s.u64_at("batch_size")?, s.u64_at("batches")?);
    let mut all: Vec<Id> = Vec::new();
    for b in 0..count {
        let ids = client
            .next_batch(ns, size)
            .map_err(|e| format!("batch {b}: {e}"))?;
        ensure(ids.len() as u64 == size, || {
            format!("batch {b}: {} ids, want {size}", ids.len())
        })?;
        increasing(&ids, &format!("batch {b}"))?;
        if let (Some(last), Some(first)) = (all.last(), ids.first()) {
            ensure(last.as_u128() < first.as_u128(), || {
                format!("batch {b} starts at {first}, not above {last}")
            })?;
        }
        all.extend(ids);
    }
    client.close().map_err(|e| format!("close: {e}"))?;
    distinct(&all, "all batches")?;
    all.iter().try_for_each(|&id| of_kind(data, ns, id))
}

/// The state of sequence namespace `ns` on the first client node, read with the scenario's
/// token and TLS. The Rust client speaks gRPC only, so the runner reads it with gRPC's
/// `Namespace` (the same state as HTTP's `GET /v1/namespaces/{ns}`): `(ids_served, ids_burned)`.
fn node_state(
    topology: &Topology,
    config: &idmint_client::ClientConfig,
    ns: &str,
) -> Result<(u64, u64), String> {
    use idmint_proto::v1::{namespace_info::Kind, NamespaceRequest};
    let url = topology
        .urls("grpc")?
        .into_iter()
        .next()
        .ok_or("the topology gives the client no node")?;
    let rt = runtime()?;
    rt.block_on(async {
        let nodes = idmint_proto::nodes::Nodes::new(
            vec![("node #1".to_owned(), url)],
            config.op_timeout,
            config.token.as_ref(),
            config.tls.as_ref(),
        )
        .map_err(|e| format!("reading the node's state: {e:?}"))?;
        let request = NamespaceRequest {
            namespace: ns.to_owned(),
        };
        let (_, info) = nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.namespace(request).await }
            })
            .await
            .map_err(|e| format!("reading the node's state of {ns}: {e:?}"))?;
        match info.kind {
            Some(Kind::Sequence(s)) => {
                let state = s.state.ok_or("the node sent no state")?;
                Ok((state.ids_served, state.ids_burned))
            }
            other => Err(format!("{ns} is not a sequence namespace: {other:?}")),
        }
    })
}

fn give_back(
    s: &Value,
    topology: &Topology,
    flavor: Flavor,
    config: &idmint_client::ClientConfig,
) -> Result<(), String> {
    let ns = s.str_at("namespace")?;
    let take = s.u64_at("take")?;
    let connect = || Under::connect(flavor, config.clone()).map_err(|e| format!("connect: {e}"));
    let a = connect()?;
    let taken: Result<Vec<Id>, String> = (0..take)
        .map(|i| {
            a.next(ns)
                .map_err(|e| format!("client A, call {}: {e}", i + 1))
        })
        .collect();
    let report = a.close().map_err(|e| format!("close: {e}"))?;
    let taken = taken?;
    ensure(report.burned == 0, || {
        format!("client A's close burned {} ids", report.burned)
    })?;
    let (served, burned) = node_state(topology, config, ns)?;
    ensure(burned == 0, || format!("the node burned {burned} ids"))?;
    ensure(served == take, || {
        format!("the node served {served} ids, want {take}: the unused tail did not go back")
    })?;
    let last = taken.last().ok_or("client A took no id")?.as_u128();
    let b = connect()?;
    let first = b.next(ns).map_err(|e| format!("client B: {e}"));
    b.close().map_err(|e| format!("close B: {e}"))?;
    let first = first?.as_u128();
    ensure(first == last + 1, || {
        format!(
            "client B's first id is {first}, want {} (A's last + 1)",
            last + 1
        )
    })
}

fn failover(
    data: &Value,
    s: &Value,
    client: &Under,
    topology: &mut Topology,
) -> Result<(), String> {
    let ns = s.str_at("namespace")?;
    let workers = s.u64_at("workers")?;
    let (before, after) = (s.u64_at("ids_before")?, s.u64_at("ids_after")?);
    let result = (|| {
        let mut lists = client
            .workers(ns, workers, before)
            .map_err(|e| format!("before the kill: {e}"))?;
        topology.node_mut(s.str_at("kill")?)?.kill()?;
        let more = client
            .workers(ns, workers, after)
            .map_err(|e| format!("after the kill: {e}"))?;
        for (ids, more) in lists.iter_mut().zip(more) {
            ids.extend(more);
        }
        Ok::<_, String>(lists)
    })();
    client.close().map_err(|e| format!("close: {e}"))?;
    let lists = result?;
    for (w, ids) in lists.iter().enumerate() {
        ensure(ids.len() as u64 == before + after, || {
            format!("worker {w}: {} ids", ids.len())
        })?;
        increasing(ids, &format!("worker {w}, across the kill"))?;
    }
    distinct(lists.iter().flatten(), "all workers")?;
    lists
        .iter()
        .flatten()
        .try_for_each(|&id| of_kind(data, ns, id))
}

/// One call of an `error` scenario (`op`: `next`, `next_batch`, `take`).
fn call(client: &Under, call: &Value, ids_before: Option<u64>) -> Result<(), ClientError> {
    let ns = call.str_at("namespace").unwrap_or_default();
    match call.str_at("op").unwrap_or_default() {
        "next" => client.next(ns).map(drop),
        "next_batch" => client
            .next_batch(ns, call.u64_at("count").unwrap_or_default())
            .map(drop),
        "take" => {
            let limit = call.u64_at("limit").unwrap_or_default();
            for ok in 0..limit {
                if let Err(e) = client.next(ns) {
                    if let Some(want) = ids_before {
                        assert_eq!(ok, want, "calls of next that succeeded before {e}");
                    }
                    return Err(e);
                }
            }
            panic!("{limit} calls of next({ns}) did not fail");
        }
        other => panic!("op {other:?}: this runner has no such call"),
    }
}

fn error(s: &Value, connected: Result<Under, ClientError>) -> Result<(), String> {
    let expect = s.str_at("expect")?;
    let spec = s.get("call").ok_or("no call")?;
    let after: &[Value] = spec
        .get("after")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let after_close = spec.get("after_close").and_then(Value::as_bool) == Some(true);
    let ids_before = s.get("ids_before").and_then(Value::as_u64);
    let got = match connected {
        // The Rust client connects eagerly (it asks a node at once): a refusal there is the
        // call's answer when nothing had to succeed before the call.
        Err(e) if after.is_empty() && !after_close && ids_before.is_none() => e,
        Err(e) => return Err(format!("connecting: {e}")),
        Ok(client) => {
            let result = (|| {
                for (i, before) in after.iter().enumerate() {
                    call(&client, before, None).map_err(|e| format!("after call {i}: {e}"))?;
                }
                if after_close {
                    client.close().map_err(|e| format!("close: {e}"))?;
                }
                match call(&client, spec, ids_before) {
                    Ok(()) => Err(format!("the call succeeded; want {expect}")),
                    Err(e) => Ok(e),
                }
            })();
            client.close().map_err(|e| format!("close: {e}"))?;
            result?
        }
    };
    ensure(got.code() == Some(expect), || {
        format!("want {expect}, got {:?}: {got:?}", got.code())
    })
}

/// A gRPC code by the name the specification gives it.
fn grpc_code(name: &str) -> Result<GrpcCode, String> {
    Ok(match name {
        "CANCELLED" => GrpcCode::Cancelled,
        "UNKNOWN" => GrpcCode::Unknown,
        "INVALID_ARGUMENT" => GrpcCode::InvalidArgument,
        "DEADLINE_EXCEEDED" => GrpcCode::DeadlineExceeded,
        "NOT_FOUND" => GrpcCode::NotFound,
        "ALREADY_EXISTS" => GrpcCode::AlreadyExists,
        "PERMISSION_DENIED" => GrpcCode::PermissionDenied,
        "RESOURCE_EXHAUSTED" => GrpcCode::ResourceExhausted,
        "FAILED_PRECONDITION" => GrpcCode::FailedPrecondition,
        "ABORTED" => GrpcCode::Aborted,
        "OUT_OF_RANGE" => GrpcCode::OutOfRange,
        "UNIMPLEMENTED" => GrpcCode::Unimplemented,
        "INTERNAL" => GrpcCode::Internal,
        "UNAVAILABLE" => GrpcCode::Unavailable,
        "DATA_LOSS" => GrpcCode::DataLoss,
        "UNAUTHENTICATED" => GrpcCode::Unauthenticated,
        other => return Err(format!("unknown gRPC code {other}")),
    })
}

/// The `error_table` kind for gRPC answers: each code's error is of one variant (the Rust
/// equivalent of a class per code is the variant with [`ClientError::code`]), keeps the code
/// and shows the node's message; a newer node's code is kept; the client's own codes have
/// their errors. HTTP answers: not applicable (no HTTP transport).
fn error_table(data: &Value) -> Result<(), String> {
    const NODE_MESSAGE: &str = "what a person reads";
    let namespace = "photos";
    let entries = data
        .get("error_codes")
        .and_then(Value::as_array)
        .ok_or("no error_codes")?;
    let mut statuses = Vec::new();
    for entry in entries {
        let code = entry.str_at("code")?;
        let Some(grpc) = entry.get("grpc").and_then(Value::as_str) else {
            continue;
        };
        let status = grpc_code(grpc)?;
        statuses.push(status);
        let e = ClientError::from_grpc(
            namespace,
            status,
            format!("{code}: {NODE_MESSAGE}"),
            Some(code),
        );
        ensure(e.code() == Some(code), || {
            format!("{code} ({grpc}): the error's code is {:?}: {e:?}", e.code())
        })?;
        // The unknown namespace's error names the namespace instead of repeating the node.
        let shown = match &e {
            ClientError::UnknownNamespace { .. } => namespace,
            _ => NODE_MESSAGE,
        };
        ensure(e.to_string().contains(shown), || {
            format!("{code}: the error {e} does not show {shown:?}")
        })?;
        ensure(!e.is_retryable() || grpc == "UNAVAILABLE", || {
            format!("{code}: only UNAVAILABLE answers are retryable")
        })?;
    }
    for status in statuses {
        let e = ClientError::from_grpc(namespace, status, "newer", Some("brand_new"));
        ensure(e.code() == Some("brand_new"), || {
            format!("a newer node's code on {status:?}: {e:?}")
        })?;
    }
    let own = data
        .get("client_error_codes")
        .and_then(Value::as_array)
        .ok_or("no client_error_codes")?;
    for entry in own {
        let code = entry.str_at("code")?;
        let e = match code {
            "unavailable" => {
                ClientError::from_grpc(namespace, GrpcCode::Unavailable, "refused", None)
            }
            "closed" => ClientError::Closed,
            other => return Err(format!("the client has no error for its code {other}")),
        };
        ensure(e.code() == Some(code), || format!("{code}: {e:?}"))?;
    }
    Ok(())
}

#[test]
fn every_scenario_is_known() {
    let data = load();
    let scenarios = data
        .get("scenarios")
        .and_then(Value::as_array)
        .expect("scenarios.json has scenarios");
    let unknown: Vec<String> = scenarios
        .iter()
        .filter_map(|s| suite::plan(s).err())
        .collect();
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}

#[test]
fn not_applicable_runs_are_listed() {
    let data = load();
    let scenarios = data
        .get("scenarios")
        .and_then(Value::as_array)
        .expect("scenarios.json has scenarios");
    let (mut runs, mut absent) = (0, Vec::new());
    for s in scenarios {
        let plan = suite::plan(s).unwrap_or_else(|e| panic!("{e}"));
        runs += plan.runs.len();
        absent.extend(plan.not_applicable);
        if s.get("kind").and_then(Value::as_str) == Some("error_table") {
            absent.push((
                format!(
                    "{} [error_table, http]",
                    s.str_at("name").unwrap_or_default()
                ),
                "the Rust client has no HTTP/JSON transport (gRPC only)",
            ));
        }
    }
    say(&format!(
        "{runs} runs made; {} not applicable to the Rust client (transports: {}):",
        absent.len(),
        suite::TRANSPORTS.join(", ")
    ));
    for (label, why) in &absent {
        say(&format!("n/a  {label}: {why}"));
    }
    assert!(runs > 0, "the Rust client makes no run of the suite");
}

#[test]
fn unique_concurrent_scenarios() {
    run_kind("unique_concurrent");
}

#[test]
fn batches_scenarios() {
    run_kind("batches");
}

#[test]
fn give_back_scenarios() {
    run_kind("give_back");
}

#[test]
fn failover_scenarios() {
    run_kind("failover");
}

#[test]
fn error_scenarios() {
    run_kind("error");
}

#[test]
fn error_table_scenarios() {
    run_kind("error_table");
}

#[test]
fn decode_offline_scenarios() {
    run_kind("decode_offline");
}
