//! The RESP front-end (docs/resp.md): any Redis client (`redis-cli`, redis-py, Jedis, go-redis,
//! `redis-benchmark`) gets ids from a node. `INCR ns` answers the next id of namespace `ns`;
//! `INCRBY`, `IDMINT.NEXT`, `IDMINT.BLOCK`, `IDMINT.GIVEBACK`, `IDMINT.DECODE`, `IDMINT.REBASE`
//! and `IDMINT.RETIRE` the rest of the API; `MULTI`/`EXEC`/`DISCARD` queue commands and run
//! them in order; `PING`, `HELLO` (RESP2 and RESP3), `CLIENT`, `COMMAND`, `INFO`, `SELECT 0`,
//! `CONFIG GET` and `QUIT` are there for clients' handshakes. A sibling of [`crate::http`]
//! over the node's operations (`crate::node::requests`): it parses, calls one operation,
//! encodes; it authenticates, limits and computes nothing itself.
//!
//! Modules: [`frame`] reads a request frame without trusting it, [`command`] reads its
//! arguments into a typed [`command::Command`] (or the error line to answer), [`reply`] writes
//! answers as RESP2 or RESP3, [`error`] maps the node's errors to RESP error lines.
//!
//! Invariants:
//! - Answers come in request order: each connection runs its commands one after another.
//!   Pipelined requests are read in batches; the replies of every complete request in the read
//!   buffer are written in one write, when the buffer holds no further complete request.
//! - Nothing a client sends makes the node panic, recurse, or allocate without bound: a request
//!   is a flat array of at most [`frame::MAX_ARGS`] bulk strings and at most
//!   [`MAX_REQUEST_BYTES`] (before a successful `AUTH`, with `[auth]` on:
//!   [`MAX_REQUEST_BYTES_BEFORE_AUTH`]), checked from its headers before its bytes are read;
//!   anything else answers `-ERR Protocol error: ...` and the connection is closed. A request
//!   begun must be complete within `server.header_read_timeout_ms`. Answers waiting to be
//!   written are written (waiting for the client to read them) once they pass 256 KiB. A
//!   `MULTI` queues at most [`MAX_QUEUED`] commands.
//! - With `[auth]`, a connection starts unauthenticated: everything but the handshake
//!   commands answers `-NOAUTH` until `AUTH <token>` (or `AUTH user <token>`, or `HELLO 3 AUTH
//!   user <token>`) names a token the node knows (otherwise `-WRONGPASS`), and a connection may
//!   send at most [`MAX_COMMANDS_BEFORE_AUTH`] commands before one succeeds, then is closed.
//! - The connection is policed like every other ([`crate::server::conn`]): its first command
//!   within `server.header_read_timeout_ms`, closed when idle; on draining it finishes the
//!   command it is running, writes its answers and closes, and commands read but not started
//!   are not run.
//! - With TLS (Redis clients speak it too: `redis-cli --tls`, `rediss://`), the server runs the
//!   handshake before the connection gets here.

pub mod command;
pub mod error;
pub mod frame;
pub mod reply;

use crate::auth::Caller;
use crate::error::IdError;
use crate::metrics::RespLabels;
use crate::node::requests::Credentials;
use crate::node::Node;
use crate::server::shutdown::Shutdown;
use crate::server::Connection;
use bytes::{Buf, Bytes, BytesMut};
use command::{Command, Refusal};
use frame::{Frame, Limits};
use idmint_core::Block;
use prometheus_client::metrics::counter::Counter;
use reply::{Protocol, Reply};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest request (one RESP frame) a connection accepts, in bytes. Nothing legitimate comes
/// near: names are at most 128 bytes, ids at most 40.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The largest request before a successful `AUTH` (with `[auth]` on): the handshake commands
/// and a token fit easily.
pub const MAX_REQUEST_BYTES_BEFORE_AUTH: usize = 4 * 1024;

/// The most commands a connection may send before a successful `AUTH` (with `[auth]` on).
pub const MAX_COMMANDS_BEFORE_AUTH: u32 = 16;

/// The most commands one `MULTI` may queue.
pub const MAX_QUEUED: usize = 1024;

/// Answers held before they are written even though more requests are waiting: bounds a
/// connection's memory when a client pipelines requests with large answers.
const MAX_PENDING_OUTPUT: usize = 256 * 1024;

/// How much a connection reads at a time.
const READ_CHUNK: usize = 16 * 1024;

/// The Redis version announced in `HELLO` and `INFO`: the protocol level idmint speaks, for
/// clients that choose features by version.
const REDIS_VERSION: &str = "7.2.0";

/// What every RESP connection of a node shares (held by the node, made on first use).
#[derive(Debug)]
pub(crate) struct Shared {
    /// `idmint_resp_commands_total`, looked up once: one atomic add per command.
    counters: CommandCounters,
    clients: AtomicUsize,
    next_client_id: AtomicU64,
}

impl Shared {
    /// The state of a node whose metrics are `metrics`.
    pub(crate) fn new(metrics: &crate::metrics::Metrics) -> Self {
        Shared {
            counters: CommandCounters::new(metrics),
            clients: AtomicUsize::new(0),
            next_client_id: AtomicU64::new(1),
        }
    }
}

/// One client's connection state.
#[derive(Debug)]
struct Client {
    id: u64,
    protocol: Protocol,
    name: Option<Bytes>,
    /// Who this connection is: `None` until a successful `AUTH` when `[auth]` is on.
    caller: Option<Caller>,
    /// Commands sent while unauthenticated.
    before_auth: u32,
    /// The transaction `MULTI` began; `None` outside one.
    transaction: Option<Transaction>,
}

/// The commands queued by `MULTI`, owned (the read buffer moves on).
#[derive(Debug, Default)]
struct Transaction {
    commands: Vec<Vec<Bytes>>,
    /// A queued command was refused: `EXEC` runs nothing.
    refused: bool,
}

impl Client {
    fn credentials(&self) -> Credentials<'static> {
        Credentials::Session(self.caller)
    }

    /// Whether this connection still has to authenticate.
    fn unauthenticated(&self, node: &Node) -> bool {
        self.caller.is_none() && node.auth().enabled()
    }

    /// The limits of its next request.
    fn limits(&self, node: &Node) -> Limits {
        Limits {
            request: if self.unauthenticated(node) {
                MAX_REQUEST_BYTES_BEFORE_AUTH
            } else {
                MAX_REQUEST_BYTES
            },
        }
    }
}

/// What a connection does after a command.
enum Next {
    Go,
    Close,
}

/// Serves one connection until the client leaves, sends `QUIT` or garbage, the policy closes
/// it, or draining.
pub(crate) async fn serve_connection(node: Arc<Node>, mut conn: Connection, shutdown: Shutdown) {
    let shared = node.resp_state();
    shared.clients.fetch_add(1, Ordering::Relaxed);
    let activity = conn.activity().clone();
    let mut client = Client {
        id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
        protocol: Protocol::Resp2,
        name: None,
        caller: (!node.auth().enabled()).then_some(Caller::Open),
        before_auth: 0,
        transaction: None,
    };
    let header_timeout = node.config().listen.header_read_timeout;
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    // One wait for draining for the whole connection, not one per read.
    let draining = shutdown.draining();
    tokio::pin!(draining);
    let result: std::io::Result<()> = async {
        loop {
            // Answer every complete request read so far, in order.
            let mut next = Next::Go;
            while let Next::Go = next {
                skip_empty_lines(&mut input);
                if input.is_empty() {
                    break;
                }
                match frame::parse(&input, client.limits(&node)) {
                    Frame::Request { args, used } => {
                        let _in_flight = activity.begin();
                        let (slices, n) = args.slices(&input);
                        next = request(&node, shared, &mut client, &slices[..n], &mut output).await;
                        input.advance(used);
                        // Draining began: no further command starts.
                        if shutdown.is_draining() {
                            next = Next::Close;
                        }
                        // A client pipelining big answers without reading them waits here
                        // (TCP back-pressure) instead of growing the buffer.
                        if output.len() >= MAX_PENDING_OUTPUT {
                            conn.write_all(&output).await?;
                            output.clear();
                        }
                    }
                    Frame::Incomplete => break,
                    Frame::Refused(why) => {
                        protocol_error(&mut output, client.protocol, &why);
                        next = Next::Close;
                    }
                }
            }
            if !output.is_empty() {
                conn.write_all(&output).await?;
                output.clear();
            }
            if let Next::Close = next {
                return conn.shutdown().await;
            }
            input.reserve(READ_CHUNK);
            // A request begun must be complete within the header deadline.
            let partial = !input.is_empty();
            let read = async {
                if partial {
                    match tokio::time::timeout(header_timeout, conn.read_buf(&mut input)).await {
                        Ok(read) => read,
                        Err(_) => Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "a request was not complete within server.header_read_timeout_ms",
                        )),
                    }
                } else {
                    conn.read_buf(&mut input).await
                }
            };
            tokio::select! {
                read = read => {
                    if read? == 0 {
                        return Ok(());
                    }
                }
                _ = &mut draining => return conn.shutdown().await,
            }
        }
    }
    .await;
    if let Err(e) = result {
        tracing::debug!(error = %e, client = client.id, "RESP connection ended with an error");
    }
    shared.clients.fetch_sub(1, Ordering::Relaxed);
}

/// Drops the empty lines at the front of `input`: Redis reads one as an empty inline command
/// and ignores it, and `redis-cli --pipe` sends one before its closing `ECHO`.
fn skip_empty_lines(input: &mut BytesMut) {
    let blank = input
        .iter()
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    // A lone trailing CR may be the start of a CRLF still in flight: keep it for the next read.
    let blank = if blank == input.len() && input.last() == Some(&b'\r') {
        blank - 1
    } else {
        blank
    };
    if blank > 0 {
        input.advance(blank);
    }
}

fn protocol_error(output: &mut BytesMut, protocol: Protocol, why: &str) {
    reply::encode(
        Reply::error("ERR", &format!("Protocol error: {why}")),
        protocol,
        output,
    );
}

/// Runs one request, whose arguments are `args`, and appends its answer to `output`.
async fn request(
    node: &Node,
    shared: &Shared,
    client: &mut Client,
    args: &[&[u8]],
    output: &mut BytesMut,
) -> Next {
    let parsed = command::parse(args);
    if client.unauthenticated(node)
        && !matches!(parsed, Ok(Command::Auth(_) | Command::Hello { .. }))
    {
        client.before_auth += 1;
        if client.before_auth > MAX_COMMANDS_BEFORE_AUTH {
            reply::encode(
                Reply::error(
                    "NOAUTH",
                    &format!(
                        "Authentication required: {MAX_COMMANDS_BEFORE_AUTH} commands without \
                         AUTH; closing the connection"
                    ),
                ),
                client.protocol,
                output,
            );
            return Next::Close;
        }
    }
    let (answer, next) = match parsed {
        Ok(Command::Quit) => (Reply::OK, Next::Close),
        Ok(Command::Exec) => match client.transaction.take() {
            Some(t) if t.refused => (
                Reply::error(
                    "EXECABORT",
                    "Transaction discarded because of previous errors.",
                ),
                Next::Go,
            ),
            Some(t) => (exec(node, shared, client, t.commands).await, Next::Go),
            None => (Reply::error("ERR", "EXEC without MULTI"), Next::Go),
        },
        Ok(Command::Discard) => match client.transaction.take() {
            Some(_) => (Reply::OK, Next::Go),
            None => (Reply::error("ERR", "DISCARD without MULTI"), Next::Go),
        },
        Ok(command) if client.transaction.is_some() => (queue(client, command, args), Next::Go),
        Ok(Command::Multi) => {
            client.transaction = Some(Transaction::default());
            (Reply::OK, Next::Go)
        }
        Ok(command) => (run(node, shared, client, command).await, Next::Go),
        Err(refusal) => {
            if let Refusal::Invalid(e) = &refusal {
                node.count_error(e);
            }
            if let Some(t) = client.transaction.as_mut() {
                t.refused = true;
            }
            shared.counters.unparsed.inc();
            (refusal.reply(), Next::Go)
        }
    };
    reply::encode(answer, client.protocol, output);
    next
}

/// Inside a `MULTI`: the command is queued (owned), or refused (a nested `MULTI`, a full
/// queue), which makes `EXEC` run nothing of the transaction.
fn queue(client: &mut Client, command: Command<'_>, args: &[&[u8]]) -> Reply {
    let Some(t) = client.transaction.as_mut() else {
        return Reply::error("ERR", "not in MULTI");
    };
    let refused = match command {
        Command::Multi => Reply::error("ERR", "MULTI calls can not be nested"),
        _ if t.commands.len() >= MAX_QUEUED => Reply::error(
            "ERR",
            &format!("a MULTI queues at most {MAX_QUEUED} commands; send EXEC or DISCARD"),
        ),
        _ => {
            t.commands
                .push(args.iter().map(|a| Bytes::copy_from_slice(a)).collect());
            return Reply::Simple("QUEUED");
        }
    };
    t.refused = true;
    refused
}

/// Runs a parsed command.
async fn run(node: &Node, shared: &Shared, client: &mut Client, command: Command<'_>) -> Reply {
    let index = command.index();
    let answer = match command {
        Command::Ping(None) => Reply::Simple("PONG"),
        Command::Ping(Some(message)) | Command::Echo(message) => Reply::Bulk(message),
        Command::Quit => Reply::OK,
        Command::Auth(token) => auth(node, client, token),
        Command::Hello {
            protocol,
            name,
            auth: token,
        } => hello_command(node, client, protocol, name, token),
        Command::ClientSetName(name) => {
            client.name = (!name.is_empty()).then_some(name);
            Reply::OK
        }
        Command::ClientGetName => client.name.clone().map_or(Reply::Null, Reply::Bulk),
        Command::ClientId => Reply::Int(i64::try_from(client.id).unwrap_or(i64::MAX)),
        Command::ClientSetInfo | Command::Select => Reply::OK,
        Command::Command => Reply::Array(Vec::new()),
        Command::ConfigGet(parameters) => Reply::Map(
            parameters
                .into_iter()
                .map(|(name, value)| {
                    (
                        Reply::Bulk(Bytes::from_static(name.as_bytes())),
                        Reply::Bulk(Bytes::from_static(value.as_bytes())),
                    )
                })
                .collect(),
        ),
        Command::Info => match node.caller(client.credentials()) {
            Ok(_) => Reply::text(info(node, shared)),
            Err(e) => error::reply_of(&e),
        },
        Command::Multi | Command::Exec | Command::Discard => Reply::error("ERR", "not in MULTI"),
        other => answer_of(operation(node, client, other).await),
    };
    shared.counters.count_index(index, &answer);
    answer
}

/// `EXEC`: every queued command, in order, answered together.
async fn exec(node: &Node, shared: &Shared, client: &mut Client, queued: Vec<Vec<Bytes>>) -> Reply {
    let mut answers = Vec::with_capacity(queued.len());
    for args in &queued {
        let slices: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
        let answer = match command::parse(&slices) {
            Ok(command) => Box::pin(run(node, shared, client, command)).await,
            Err(refusal) => refusal.reply(),
        };
        answers.push(answer);
    }
    Reply::Array(answers)
}

/// A node operation's answer, or its error line.
fn answer_of(result: Result<Reply, IdError>) -> Reply {
    result.unwrap_or_else(|e| error::reply_of(&e))
}

/// The commands that are one of the node's operations.
async fn operation(node: &Node, client: &Client, command: Command<'_>) -> Result<Reply, IdError> {
    let who = client.credentials();
    match command {
        // `INCRBY ns 1` is `INCR ns` for every kind: clients send it for their `incr`.
        Command::Incr(name) | Command::IncrBy(name, 1) => {
            let taken = node.take_ids(who, name, None, None).await?;
            reply::one_id(&taken.ids).ok_or_else(|| IdError::Exhausted {
                name: name.to_owned(),
                bits: 0,
            })
        }
        Command::IncrBy(name, count) => node
            .take_consecutive(who, name, count)
            .await
            .map(reply::u64_id),
        Command::Next(name, count, route) => node
            .take_ids(who, name, count, route)
            .await
            .map(|t| reply::ids(&t.ids)),
        Command::Block(name, count) => node
            .take_block(who, name, Some(count), 0, 0)
            .await
            .map(|lease| reply::block(&lease.block, lease.token.unwrap_or(0))),
        Command::GiveBack {
            name,
            lease,
            start,
            end,
            step,
        } => {
            let Some(tail) = Block::new(start, end, step) else {
                let e = IdError::InvalidRequest(format!(
                    "[{start}, {end}) step {step} is not a block: start must be below end and \
                     step at least 1"
                ));
                node.count_error(&e);
                return Err(e);
            };
            node.give_back(who, name, lease, tail)
                .await
                .map(|g| reply::given_back(&g))
        }
        Command::Decode(name, id) => node.decode(who, name, id).await.map(|d| reply::decoded(&d)),
        Command::Rebase(name, above) => node
            .move_watermark(who, name, idmint_store::Advance::Rebase, Some(above))
            .await
            .map(|a| reply::advanced(&a)),
        Command::Retire(name) => node
            .move_watermark(who, name, idmint_store::Advance::Retire, None)
            .await
            .map(|a| reply::advanced(&a)),
        other => Ok(Reply::error(
            "ERR",
            &format!("'{}' is not an operation", other.name()),
        )),
    }
}

/// `AUTH`: the token for the rest of the connection. A token the node does not know answers
/// `-WRONGPASS` (as Redis does) and leaves the connection as it was; with `[auth]` off,
/// `-ERR` (as Redis answers when no password is set).
fn auth(node: &Node, client: &mut Client, token: &[u8]) -> Reply {
    if !node.auth().enabled() {
        return Reply::error(
            "ERR",
            "AUTH called without any token configured on this node ([auth] is off)",
        );
    }
    match node.auth().authenticate_token(token) {
        Ok(caller) => {
            client.caller = Some(caller);
            Reply::OK
        }
        Err(e) => {
            node.count_error(&e);
            Reply::error("WRONGPASS", "invalid token: it is not one this node knows")
        }
    }
}

/// `HELLO [protover [AUTH user token] [SETNAME name]]`.
fn hello_command(
    node: &Node,
    client: &mut Client,
    protocol: Option<u8>,
    name: Option<Bytes>,
    token: Option<Bytes>,
) -> Reply {
    if let Some(token) = token {
        let answer = auth(node, client, &token);
        if answer != Reply::OK {
            return answer;
        }
    }
    match protocol {
        Some(2) => client.protocol = Protocol::Resp2,
        Some(3) => client.protocol = Protocol::Resp3,
        _ => {}
    }
    if name.is_some() {
        client.name = name;
    }
    hello(client)
}

/// The counters of `idmint_resp_commands_total`, one per command and outcome.
#[derive(Debug)]
struct CommandCounters {
    ok: Vec<Counter>,
    error: Vec<Counter>,
    unparsed: Counter,
}

impl CommandCounters {
    fn new(metrics: &crate::metrics::Metrics) -> Self {
        let get = |command, outcome| {
            metrics
                .resp_commands
                .get_or_create(&RespLabels { command, outcome })
                .clone()
        };
        CommandCounters {
            ok: Command::NAMES.iter().map(|&n| get(n, "ok")).collect(),
            error: Command::NAMES.iter().map(|&n| get(n, "error")).collect(),
            unparsed: get("unparsed", "error"),
        }
    }

    fn count_index(&self, index: usize, answer: &Reply) {
        let counters = match answer {
            Reply::Error(_) => &self.error,
            _ => &self.ok,
        };
        if let Some(c) = counters.get(index) {
            c.inc();
        }
    }
}

/// The `HELLO` answer: who the server is and the connection's protocol.
fn hello(client: &Client) -> Reply {
    Reply::map([
        ("server", Reply::text("idmint")),
        ("version", Reply::text(REDIS_VERSION)),
        ("proto", Reply::Int(client.protocol.number())),
        (
            "id",
            Reply::Int(i64::try_from(client.id).unwrap_or(i64::MAX)),
        ),
        ("mode", Reply::text("standalone")),
        ("role", Reply::text("master")),
        ("modules", Reply::Array(Vec::new())),
        ("idmint_version", Reply::text(env!("CARGO_PKG_VERSION"))),
    ])
}

/// The `INFO` text: the Redis fields clients look for, and idmint's own.
fn info(node: &Node, shared: &Shared) -> String {
    format!(
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nidmint_version:{}\r\nredis_mode:standalone\r\n\
         process_id:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n\r\n\
         # Idmint\r\nauthority:{}\r\nnamespaces:{}\r\ndraining:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        shared.clients.load(Ordering::Relaxed),
        node.authority().kind(),
        node.all().len(),
        u8::from(node.is_draining()),
    )
}
