//! The RESP front-end (docs/resp.md): any Redis client (`redis-cli`, redis-py, Jedis, go-redis,
//! `redis-benchmark`) gets ids from a [`Node`]. `INCR ns` answers the next id of namespace `ns`;
//! `INCRBY`, `IDMINT.NEXT`, `IDMINT.BLOCK` and `IDMINT.DECODE` the rest of the HTTP API's id
//! operations; `PING`, `HELLO` (RESP2 and RESP3), `CLIENT`, `COMMAND`, `INFO`, `SELECT 0`,
//! `CONFIG GET` and `QUIT` are there for clients' handshakes. It computes nothing about
//! namespaces itself: it is a sibling of [`crate::http`] over the same domain.
//!
//! Modules: [`command`] reads a request into a typed [`command::Command`] (or the error line to
//! answer), [`reply`] writes answers as RESP2 or RESP3, [`error`] maps domain errors to RESP
//! error lines. Frames are decoded and encoded by the `redis-protocol` crate.
//!
//! Invariants:
//! - Answers come in request order: each connection runs its commands one after another.
//!   Pipelined requests are read in batches; the replies of every complete request in the read
//!   buffer are written in one write, when the buffer holds no further complete request.
//! - Nothing a client sends makes the server panic or allocate without bound: a request (one
//!   frame) may be at most [`MAX_REQUEST_BYTES`], and a longer or malformed frame answers
//!   `-ERR Protocol error: ...` and the connection is closed (the stream cannot be
//!   resynchronised); answers waiting to be written are written (waiting for the client to
//!   read them) once they pass 256 KiB, even with more requests in the buffer.
//!   An unknown command, a wrong arity, a bad argument or a domain error answers an error line
//!   and the connection goes on.
//! - With `[auth]` ([`crate::auth`]), a connection starts unauthenticated: `INCR`, `INCRBY`,
//!   `IDMINT.*` and `INFO` answer `-NOAUTH` until `AUTH <token>` (or `AUTH user <token>`,
//!   or `HELLO 3 AUTH user <token>`; the user name is ignored) names a token the node knows
//!   (otherwise `-WRONGPASS`). Then each command is checked like an HTTP request: `-NOPERM`
//!   without the scope, `-BUSY` over the token's rate. The handshake commands (`PING`,
//!   `HELLO`, `CLIENT`, `COMMAND`, `SELECT`, `CONFIG GET`, `QUIT`) stay open.
//! - Only `INCR`, `INCRBY`, `IDMINT.NEXT` and `IDMINT.BLOCK` may create a namespace or reserve
//!   ids ([`Node::namespace`]); `IDMINT.DECODE` goes through [`Node::read_namespace`].
//! - At most `server.max_connections` connections are served at once (like HTTP and gRPC, each
//!   front-end its own): the next one is not accepted until one closes.
//! - Shutdown ([`serve`]): accepting stops; a connection finishes the command it is executing,
//!   writes the answers it has, and closes; commands it has read but not started are not run.
//!   [`serve`] returns once every connection has closed. It never shuts the node down: the
//!   caller does, once, after every front-end stopped (invariants 2 and 3 rely on the hand-back
//!   running after the last id was handed out).
//! - With TLS ([`serve_with_tls`]; Redis clients speak it too: `redis-cli --tls`, `rediss://`),
//!   the handshake runs in the connection's task within `server.header_read_timeout_ms`; a
//!   client stalled in it, or speaking plain RESP to the TLS port, is closed then, alone.

pub mod command;
pub mod error;
pub mod reply;

use crate::auth::{Caller, Scope};
use crate::error::IdError;
use crate::metrics::{ErrorLabels, RespLabels};
use crate::namespace::Namespace;
use crate::registry::Node;
use bytes::Buf;
use bytes::{Bytes, BytesMut};
use command::{Command, Refusal};
use prometheus_client::metrics::counter::Counter;
use redis_protocol::resp2::types::RangeFrame;
use reply::{Protocol, Reply};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The largest request (one RESP frame) a connection accepts, in bytes. Nothing legitimate comes
/// near: names are at most 128 bytes, ids at most 40.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Answers held before they are written even though more requests are waiting: bounds a
/// connection's memory when a client pipelines requests with large answers.
const MAX_PENDING_OUTPUT: usize = 256 * 1024;

/// How much a connection reads at a time.
const READ_CHUNK: usize = 16 * 1024;

/// The Redis version announced in `HELLO` and `INFO`: the protocol level idmint speaks, for
/// clients that choose features by version.
const REDIS_VERSION: &str = "7.2.0";

/// What every connection of one [`serve`] shares.
#[derive(Debug)]
struct Shared {
    node: Arc<Node>,
    /// `idmint_resp_commands_total`, looked up once: one atomic add per command.
    counters: CommandCounters,
    /// TLS on this listener, and how long a handshake may take.
    tls: Option<crate::tls::Acceptor>,
    handshake_timeout: Duration,
    clients: AtomicUsize,
    next_client_id: AtomicU64,
    port: u16,
}

/// Serves RESP on `listener` until `shutdown` resolves, then stops accepting, lets each
/// connection finish the command it is executing and write its answers, closes every connection
/// and returns. Does not shut `node` down ([`Node::shutdown`] is the caller's, after every
/// front-end has returned).
///
/// Errors accepting a connection (out of file descriptors, a connection reset before it was
/// accepted) are logged and accepting goes on, so today this returns `Ok(())`; the `Result` is
/// for failures a later version cannot recover from.
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_until(node, listener, None, shutdown, std::future::pending()).await
}

/// [`serve`] as one of the node's front-ends ([`crate::serve_front_ends`]): it stops accepting
/// when `shutdown` starts draining, and cuts the connections still open when it stops now (the
/// drain deadline, a second signal), so the caller's hand-back runs after every request future
/// was dropped.
pub async fn serve_with(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: crate::Shutdown,
) -> std::io::Result<()> {
    serve_with_tls(node, listener, None, shutdown).await
}

/// [`serve_with`], over TLS when `tls` is given (no ALPN: Redis clients announce none).
pub async fn serve_with_tls(
    node: Arc<Node>,
    listener: TcpListener,
    tls: Option<crate::tls::ServerTls>,
    shutdown: crate::Shutdown,
) -> std::io::Result<()> {
    let (drain, stop) = (shutdown.clone(), shutdown);
    serve_until(
        node,
        listener,
        tls.map(|tls| tls.acceptor(&[])),
        async move { drain.draining().await },
        async move { stop.stopping_now().await },
    )
    .await
}

async fn serve_until(
    node: Arc<Node>,
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop_now: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handshake_timeout = node.config().listen.header_read_timeout;
    let max_connections = node.config().listen.max_connections;
    let shared = Arc::new(Shared {
        counters: CommandCounters::new(node.metrics()),
        node,
        tls,
        handshake_timeout,
        clients: AtomicUsize::new(0),
        next_client_id: AtomicU64::new(1),
        port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            // At most `server.max_connections` at once, as HTTP and gRPC: past it the next
            // connection waits in the listen backlog until one closes (reaped below).
            accepted = listener.accept(), if connections.len() < max_connections => match accepted {
                Ok((stream, _peer)) => {
                    // Replies are written in batches already; Nagle would only delay them.
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(shared.clone(), stream, stopped.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "RESP: accepting a connection failed");
                    // Out of descriptors, say: give connections a moment to close.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop.send(true);
    tracing::info!(
        connections = connections.len(),
        "RESP: stopped accepting; finishing the commands in flight"
    );
    let finished = async { while connections.join_next().await.is_some() {} };
    tokio::select! {
        () = finished => {}
        () = stop_now => {
            tracing::info!("RESP: cutting the connections left");
            connections.abort_all();
            while connections.join_next().await.is_some() {}
        }
    }
    Ok(())
}

/// One client's connection state.
#[derive(Debug)]
struct Client {
    id: u64,
    protocol: Protocol,
    name: Option<Bytes>,
    /// The namespaces this connection asked for ids most recently, newest last (at most
    /// [`NAMESPACE_CACHE`]): a node never removes a namespace it serves, so the `Arc` stays the
    /// one [`Node::namespace`] would return, and the hot path skips the name check, the hash
    /// and the map's lock.
    namespaces: Vec<Arc<Namespace>>,
    /// Who this connection is: `None` until a successful `AUTH` when `[auth]` is on.
    caller: Option<Caller>,
}

/// How many namespaces a connection remembers.
const NAMESPACE_CACHE: usize = 8;

impl Client {
    /// [`Node::namespace`], through this connection's cache.
    async fn namespace(&mut self, node: &Node, name: &str) -> Result<Arc<Namespace>, IdError> {
        if let Some(ns) = self.namespaces.iter().find(|ns| ns.name().as_str() == name) {
            return Ok(ns.clone());
        }
        let ns = node.namespace(name).await?;
        if self.namespaces.len() == NAMESPACE_CACHE {
            self.namespaces.remove(0);
        }
        self.namespaces.push(ns.clone());
        Ok(ns)
    }
}

/// What a connection does after a command.
enum Next {
    Go,
    Close,
}

/// Serves one connection until the client leaves, sends `QUIT` or garbage, or shutdown.
async fn connection(shared: Arc<Shared>, stream: TcpStream, mut stopped: watch::Receiver<bool>) {
    let handshake = crate::tls::handshake(
        stream,
        shared.tls.as_ref(),
        shared.handshake_timeout,
        "resp",
    );
    let mut stream = tokio::select! {
        stream = handshake => match stream {
            Some(stream) => stream,
            None => return,
        },
        () = stop_requested(&mut stopped) => return,
    };
    shared.clients.fetch_add(1, Ordering::Relaxed);
    let mut client = Client {
        id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
        protocol: Protocol::Resp2,
        name: None,
        namespaces: Vec::new(),
        caller: (!shared.node.auth().enabled()).then_some(Caller::Open),
    };
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    let result: std::io::Result<()> = async {
        loop {
            // Answer every complete request read so far, in order.
            let mut next = Next::Go;
            while let Next::Go = next {
                skip_empty_lines(&mut input);
                // Decoded in place: the arguments are slices of the read buffer, which moves on
                // once the request is answered.
                match redis_protocol::resp2::decode::decode_range(&input) {
                    Ok(Some((frame, used))) => {
                        next = request(&shared, &mut client, &input, &frame, &mut output).await;
                        input.advance(used);
                        // Shutdown began (or serve is gone): no further command starts.
                        if !matches!(stopped.has_changed(), Ok(false)) {
                            next = Next::Close;
                        }
                        // A client pipelining big answers without reading them waits here
                        // (TCP back-pressure) instead of growing the buffer.
                        if output.len() >= MAX_PENDING_OUTPUT {
                            stream.write_all(&output).await?;
                            output.clear();
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let why = if input.first().is_some_and(u8::is_ascii_alphabetic) {
                            "inline commands are not supported; send RESP arrays".to_owned()
                        } else {
                            e.details().to_owned()
                        };
                        protocol_error(&mut output, client.protocol, &why);
                        next = Next::Close;
                    }
                }
            }
            if matches!(next, Next::Go) && input.len() >= MAX_REQUEST_BYTES {
                protocol_error(
                    &mut output,
                    client.protocol,
                    &format!("a request is larger than {MAX_REQUEST_BYTES} bytes"),
                );
                next = Next::Close;
            }
            if !output.is_empty() {
                stream.write_all(&output).await?;
                output.clear();
            }
            if let Next::Close = next {
                return stream.shutdown().await;
            }
            input.reserve(READ_CHUNK);
            tokio::select! {
                read = stream.read_buf(&mut input) => {
                    if read? == 0 {
                        return Ok(());
                    }
                }
                () = stop_requested(&mut stopped) => return stream.shutdown().await,
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

/// Resolves once shutdown began (or `serve` is gone).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

fn protocol_error(output: &mut BytesMut, protocol: Protocol, why: &str) {
    reply::encode(
        Reply::error("ERR", &format!("Protocol error: {why}")),
        protocol,
        output,
    );
}

/// Runs one request frame and appends its answer to `output`.
/// Runs one request frame, whose ranges index `buf`, and appends its answer to `output`.
async fn request(
    shared: &Shared,
    client: &mut Client,
    buf: &[u8],
    frame: &RangeFrame,
    output: &mut BytesMut,
) -> Next {
    // The arguments as slices of `buf`: on the stack for the usual few, no allocation.
    const ON_STACK: usize = 8;
    let mut few: [&[u8]; ON_STACK] = [&[]; ON_STACK];
    let many: Vec<&[u8]>;
    let items = match frame {
        RangeFrame::Array(items) => items.as_slice(),
        _ => &[],
    };
    let slice = |item: &RangeFrame| match item {
        RangeFrame::BulkString((start, end)) | RangeFrame::SimpleString((start, end)) => {
            buf.get(*start..*end)
        }
        _ => None,
    };
    let args: Option<&[&[u8]]> = if items.len() <= ON_STACK {
        let mut ok = !items.is_empty();
        for (slot, item) in few.iter_mut().zip(items) {
            match slice(item) {
                Some(arg) => *slot = arg,
                None => ok = false,
            }
        }
        ok.then_some(&few[..items.len()])
    } else {
        many = items.iter().map_while(slice).collect();
        (many.len() == items.len()).then_some(many.as_slice())
    };
    let Some(args) = args else {
        reply::encode(Refusal::NotACommand.reply(), client.protocol, output);
        return Next::Go;
    };
    let node = &shared.node;
    let max_count = node.config().max_count;
    let (answer, next) = match command::parse(args, max_count, max_count.max(1_000_000)) {
        Ok(Command::Quit) => {
            shared.counters.count(&Command::Quit, &Reply::OK);
            (Reply::OK, Next::Close)
        }
        Ok(command) => {
            let index = command.index();
            let answer = run(shared, client, command).await;
            shared.counters.count_index(index, &answer);
            (answer, Next::Go)
        }
        Err(refusal) => {
            if let Refusal::Invalid(e) = &refusal {
                count_error(node, e);
            }
            shared.counters.unparsed.inc();
            (refusal.reply(), Next::Go)
        }
    };
    reply::encode(answer, client.protocol, output);
    next
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

    fn count(&self, command: &Command<'_>, answer: &Reply) {
        self.count_index(command.index(), answer);
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

fn count_error(node: &Node, e: &IdError) {
    node.metrics()
        .errors
        .get_or_create(&ErrorLabels {
            code: e.code().as_str(),
        })
        .inc();
}

/// Runs a parsed command.
async fn run(shared: &Shared, client: &mut Client, command: Command<'_>) -> Reply {
    let node = &shared.node;
    let answer = match command {
        Command::Ping(None) => Ok(Reply::Simple("PONG")),
        Command::Ping(Some(message)) | Command::Echo(message) => Ok(Reply::Bulk(message)),
        Command::Quit => Ok(Reply::OK),
        Command::Auth(token) => return auth(node, client, token),
        Command::Hello {
            protocol,
            name,
            auth: token,
        } => {
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
            Ok(hello(client))
        }
        Command::ClientSetName(name) => {
            client.name = (!name.is_empty()).then_some(name);
            Ok(Reply::OK)
        }
        Command::ClientGetName => Ok(client.name.clone().map_or(Reply::Null, Reply::Bulk)),
        Command::ClientId => Ok(Reply::Int(i64::try_from(client.id).unwrap_or(i64::MAX))),
        Command::ClientSetInfo | Command::Select => Ok(Reply::OK),
        Command::Command | Command::ConfigGet => Ok(Reply::Array(Vec::new())),
        Command::Info => authenticated(client).map(|_| Reply::text(info(shared))),
        Command::Incr(name) => incr(node, client, name).await,
        Command::IncrBy(name, count) => incr_by(node, client, name, count).await,
        Command::Next(name, count) => {
            async {
                let caller = allow(node, client, name, Scope::Ids, count)?;
                let ids = client.namespace(node, name).await?.ids(count).await?;
                node.auth().served(caller, ids.len() as u64);
                Ok(reply::ids(&ids))
            }
            .await
        }
        Command::Block(name, count) => {
            async {
                let caller = allow(node, client, name, Scope::Blocks, count)?;
                let ns = client.namespace(node, name).await?;
                let count =
                    crate::config::block_request(&ns, count, node.auth().max_block_32(caller));
                let block = ns.block(count).await?;
                node.auth().served(caller, block.len());
                Ok(reply::block(&block))
            }
            .await
        }
        Command::Rebase(name, above) => {
            async {
                allow(node, client, name, Scope::Admin, 0)?;
                let a = node
                    .advance(name, idmint_store::Advance::Rebase, Some(above))
                    .await?;
                Ok(reply::advanced(&a))
            }
            .await
        }
        Command::Retire(name) => {
            async {
                allow(node, client, name, Scope::Admin, 0)?;
                let a = node
                    .advance(name, idmint_store::Advance::Retire, None)
                    .await?;
                Ok(reply::advanced(&a))
            }
            .await
        }
        Command::Decode(name, id) => match allow(node, client, name, Scope::Read, 0) {
            Err(e) => Err(e),
            Ok(_) => match node.read_namespace(name).await {
                Ok(ns) => ns.decode(id).map(|d| reply::decoded(&d)),
                // The domain's message is about auto_create, which does not matter to a read.
                Err(e @ IdError::UnknownNamespace(_)) if node.config().auto_create => {
                    count_error(node, &e);
                    return Reply::error(
                        error::code_of(&e),
                        &format!(
                            "namespace {name:?} does not exist; reads do not create namespaces \
                         (INCR {name} does)"
                        ),
                    );
                }
                Err(e) => Err(e),
            },
        },
    };
    answer.unwrap_or_else(|e| {
        count_error(node, &e);
        error::reply_of(&e)
    })
}

/// The connection's caller, or `NOAUTH` when `[auth]` is on and no `AUTH` succeeded yet.
fn authenticated(client: &Client) -> Result<Caller, IdError> {
    client.caller.ok_or_else(|| {
        IdError::Unauthorized(
            "Authentication required: this node has [auth] on; send AUTH <token> first".into(),
        )
    })
}

/// The connection's caller, once it may run an operation needing `scope` on `name` for
/// `count` ids ([`crate::auth::Auth::authorize`]).
fn allow(
    node: &Node,
    client: &Client,
    name: &str,
    scope: Scope,
    count: u64,
) -> Result<Caller, IdError> {
    let caller = authenticated(client)?;
    node.auth().authorize(caller, name, scope, count)?;
    Ok(caller)
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
            count_error(node, &e);
            Reply::error("WRONGPASS", "invalid token: it is not one this node knows")
        }
    }
}

/// `INCR`: one id.
async fn incr(node: &Node, client: &mut Client, name: &str) -> Result<Reply, IdError> {
    let caller = allow(node, client, name, Scope::Ids, 1)?;
    let ns = client.namespace(node, name).await?;
    let ids = ns.ids(1).await?;
    node.auth().served(caller, ids.len() as u64);
    reply::one_id(&ids).ok_or_else(|| IdError::Exhausted {
        name: name.to_owned(),
        bits: 0,
    })
}

/// `INCRBY ns n`: the Redis contract is that the caller owns `v-n+1 ..= v` for the answer `v`,
/// which holds only for `n` consecutive integers. So it is answered for sequence namespaces of
/// step 1 only, from one block of exactly `n` ids ([`crate::namespace::SequenceNamespace::consecutive`]: a shorter
/// remainder of the node's current block is burned, never handed out, a few times at most).
///
/// `INCRBY ns 1` is `INCR ns` for every kind: clients send it for their `incr` (redis-py does).
async fn incr_by(
    node: &Node,
    client: &mut Client,
    name: &str,
    count: u64,
) -> Result<Reply, IdError> {
    if count == 1 {
        return incr(node, client, name).await;
    }
    let caller = allow(node, client, name, Scope::Ids, count)?;
    let ns = client.namespace(node, name).await?;
    let seq = match &*ns {
        Namespace::Sequence(s) if s.spec().step() == 1 => s,
        Namespace::Sequence(s) => {
            return Err(IdError::WrongKind(format!(
                "namespace {name:?} has step {}: INCRBY's answer v stands for the ids v-n+1..v, \
                 which are not all its ids; use IDMINT.NEXT {name} {count}",
                s.spec().step()
            )))
        }
        other => {
            return Err(IdError::WrongKind(format!(
                "namespace {name:?} is a {} namespace: INCRBY's answer v stands for the ids \
                 v-n+1..v, which only a sequence namespace of step 1 hands out; use IDMINT.NEXT \
                 {name} {count}",
                other.kind()
            )))
        }
    };
    let cap = crate::config::block_request(&ns, count, node.auth().max_block_32(caller));
    if cap < count {
        return Err(IdError::InvalidCount(format!(
            "INCRBY {name} {count}: a 32-bit namespace hands out at most {cap} ids per block \
             request; use IDMINT.NEXT {name} {count}"
        )));
    }
    if let Some(block) = seq.consecutive(count).await? {
        node.auth().served(caller, count);
        return Ok(reply::u64_id(block.last()));
    }
    Err(IdError::InvalidCount(format!(
        "INCRBY {name} {count}: the namespace's blocks hold fewer than {count} consecutive ids; \
         use IDMINT.NEXT {name} {count}"
    )))
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
fn info(shared: &Shared) -> String {
    let node = &shared.node;
    format!(
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nidmint_version:{}\r\nredis_mode:standalone\r\n\
         process_id:{}\r\ntcp_port:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n\r\n\
         # Idmint\r\nauthority:{}\r\nnamespaces:{}\r\ndraining:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        shared.port,
        shared.clients.load(Ordering::Relaxed),
        node.authority().kind(),
        node.all().len(),
        u8::from(node.is_draining()),
    )
}
