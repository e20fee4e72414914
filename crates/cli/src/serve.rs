//! `idmint serve`: reads the configuration file, connects the authority, binds the HTTP (and
//! gRPC, when asked for) listeners and runs the node until Ctrl-C or SIGTERM.
//!
//! Shutdown has two stages ([`idmint_node::Shutdown`]): the first Ctrl-C or SIGTERM drains
//! (stop accepting, finish requests in flight for at most `server.drain_timeout_ms`); a second
//! one stops at once (cuts the requests in flight). Either way the node then hands back its
//! unused ids before the process exits, so an operator never needs kill -9 (which burns every
//! buffer).
//!
//! `--http` takes `HOST:PORT` with a host name or an address (`localhost:7878`,
//! `0.0.0.0:7878`, `[::1]:7878`); a name is resolved and the first of its addresses that can
//! be bound is used. `--grpc HOST:PORT` (or `[server] grpc`) also serves the gRPC API there, and
//! `--resp HOST:PORT` (or `[server] resp`) the Redis protocol, under the same shutdown stages;
//! without them, no such port is opened (so nodes started side by side never fight over a
//! default port). The node's stdout lines (listening, gRPC and RESP listening when on,
//! stopped) are best effort: a closed
//! stdout must not stop a server. The listening line is printed once, after the declared
//! namespaces are set up: a node that fails to start never claims to listen.
//!
//! Without `[auth]` in the configuration, every address must be loopback unless
//! `--insecure-no-auth` is given ([`check_exposure`]): otherwise anyone who can reach a port
//! could create namespaces and take ids.
//!
//! Logs go to stderr: `--log-format text` (the default) colours them only when stderr is a
//! terminal; `--log-format json` writes one JSON object per line for log shippers.

use anyhow::{bail, Context, Result};
use idmint_node::{FileConfig, Node, Shutdown};
use idmint_store::{CheckedAuthority, NodeRecord, StoreExpectations};
use std::io::IsTerminal;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The HTTP address when neither `--http` nor the file gives one.
const DEFAULT_HTTP: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7878,
));

/// How `idmint serve` writes its log lines (on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Installs the log subscriber: `RUST_LOG` (default `info`), on stderr, in `format`.
fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// The data directory when neither `--data-dir` nor the file gives one: the user's data
/// directory (XDG), absolute, so that where the command runs from never changes the store.
fn default_data_dir() -> Result<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").and_then(absolute) {
        return Ok(xdg.join("idmint"));
    }
    match std::env::var_os("HOME").and_then(absolute) {
        Some(home) => Ok(home.join(".local").join("share").join("idmint")),
        None => bail!(
            "no data directory: pass --data-dir DIR (or set server.data_dir); neither \
             XDG_DATA_HOME nor HOME names an absolute directory to put the default under"
        ),
    }
}

/// The configuration file at `path`, or the defaults without one.
pub(crate) fn load_config(path: Option<&std::path::Path>) -> Result<FileConfig> {
    Ok(match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            FileConfig::parse(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => FileConfig::parse("")?,
    })
}

/// The data directory, absolute: `--data-dir`, else the file's `server.data_dir`, else the
/// default.
pub(crate) fn resolve_data_dir(flag: Option<PathBuf>, file: &FileConfig) -> Result<PathBuf> {
    let dir = match flag.or(file.data_dir.clone()) {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    std::path::absolute(&dir)
        .with_context(|| format!("resolving the data directory {}", dir.display()))
}

/// What the configuration declares that lives in the store, and what `--init` and
/// `[authority] incarnation` say: the start checks of [`CheckedAuthority::open`].
fn store_expectations(file: &FileConfig, init: bool) -> StoreExpectations {
    let mut expect = StoreExpectations {
        init,
        incarnation: file.incarnation.clone(),
        ..StoreExpectations::default()
    };
    for (name, kind) in &file.node.namespaces {
        match kind {
            idmint_node::KindConfig::Sequence { .. } => {
                expect.declared_namespaces.push(name.clone())
            }
            idmint_node::KindConfig::Snowflake { group, .. } => {
                let group = group.clone().unwrap_or_else(|| name.clone());
                if !expect.declared_groups.contains(&group) {
                    expect.declared_groups.push(group);
                }
            }
            _ => {}
        }
    }
    expect
}

/// The listen addresses given on the command line (each overrides the file's).
#[derive(Debug, Default)]
pub struct Listeners {
    /// `--http`.
    pub http: Option<String>,
    /// `--grpc`.
    pub grpc: Option<String>,
    /// `--resp`.
    pub resp: Option<String>,
    /// `--tls-cert`, `--tls-key`.
    pub tls: TlsFlags,
}

/// TLS on every listener (HTTP, gRPC, RESP), overriding `[server] tls_cert` / `tls_key`.
#[derive(Debug, Default, clap::Args)]
pub struct TlsFlags {
    /// Serve every listener over TLS with this certificate chain (PEM, leaf first)
    /// [default: server.tls_cert in the config file, else no TLS]; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert [default: server.tls_key].
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The listeners' TLS: the flags' files, else the config file's; loaded now, so a bad
/// certificate or key stops the node before it touches the authority, naming the file.
fn server_tls(flags: TlsFlags, file: &FileConfig) -> Result<Option<idmint_node::tls::ServerTls>> {
    let files = match (flags.tls_cert, flags.tls_key) {
        (Some(cert), Some(key)) => Some(idmint_node::TlsFiles { cert, key }),
        _ => file.tls.clone(),
    };
    let Some(files) = files else {
        return Ok(None);
    };
    let tls = idmint_node::tls::ServerTls::load(&files.cert, &files.key).context(
        "loading the TLS certificate and key (--tls-cert/--tls-key, server.tls_cert/tls_key)",
    )?;
    tracing::info!(cert = %files.cert.display(), "TLS on every listener");
    Ok(Some(tls))
}

pub fn serve(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listeners: Listeners,
    log_format: LogFormat,
    init: bool,
    insecure_no_auth: bool,
) -> Result<()> {
    let Listeners {
        http,
        grpc,
        resp,
        tls,
    } = listeners;
    init_logs(log_format);
    let file = load_config(config.as_deref())?;
    let tls = server_tls(tls, &file)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let data_dir = resolve_data_dir(data_dir, &file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        if !file.authority.is_durable() {
            tracing::warn!(
                "memory authority: nothing survives a restart, ids WILL repeat after one"
            );
        }
        // A mistyped address is reported before the authority is touched.
        let http = match http {
            Some(http) => {
                let addrs = resolve("--http", &http, "localhost:7878 or 0.0.0.0:7878").await?;
                Some((http, addrs))
            }
            None => None,
        };
        let grpc = optional_address("--grpc", grpc, file.grpc, "127.0.0.1:7879").await?;
        let resp = optional_address("--resp", resp, file.resp, "127.0.0.1:7380").await?;
        let http_addrs = match &http {
            Some((_, addrs)) => addrs.clone(),
            None => vec![file.http.unwrap_or(DEFAULT_HTTP)],
        };
        check_exposure(
            &file,
            [
                ("--http", Some(http_addrs.as_slice())),
                ("--grpc", grpc.as_ref().map(|(_, a)| a.as_slice())),
                ("--resp", resp.as_ref().map(|(_, a)| a.as_slice())),
            ],
            insecure_no_auth,
        )?;
        tracing::info!(authority = %file.authority, "connecting the authority");
        tracing::info!(data_dir = %data_dir.display(), "data directory");
        let authority =
            idmint_store::connect_observed(&file.authority, &data_dir, Arc::new(LogMembers))
                .await
                .context("setting up the authority")?;
        // The node record: what this node set up, checked against the store
        // (docs/uniqueness.md).
        let mut opened_record = None;
        let authority: Arc<dyn idmint_store::Authority> = if file.authority.is_durable() {
            let node_record = Arc::new(
                NodeRecord::open(&data_dir, file.authority.to_string())
                    .context("opening the node record")?,
            );
            tracing::info!(
                node_record = %node_record.path().display(),
                namespaces = node_record.len(),
                "node record"
            );
            opened_record = Some(node_record.clone());
            let expect = store_expectations(&file, init);
            let checked = CheckedAuthority::open(authority, node_record, &expect)
                .await
                .with_context(|| {
                    format!(
                        "checking the store against this node's record (data directory {})",
                        data_dir.display()
                    )
                })?;
            if let Some(incarnation) = checked.incarnation() {
                tracing::info!(%incarnation, "store incarnation");
            }
            Arc::new(checked)
        } else {
            authority
        };
        let listener = match http {
            Some((http, addrs)) => bind_first("HTTP", &http, &addrs).await?,
            None => {
                let addr = file.http.unwrap_or(DEFAULT_HTTP);
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding HTTP on {addr}"))?
            }
        };
        let addr = listener.local_addr()?;
        let grpc = match grpc {
            Some((grpc, addrs)) => Some(bind_first("gRPC", &grpc, &addrs).await?),
            None => None,
        };
        let resp = match resp {
            Some((resp, addrs)) => Some(bind_first("RESP", &resp, &addrs).await?),
            None => None,
        };
        // Sets up the declared namespaces; an error here ends the process before it claims to
        // listen.
        // The process-wide coarse clock: snowflake, UUIDv7 and ULID namespaces read time with
        // one atomic load on the hot path (re-reading the precise clock before they would
        // wait), as the library's default generators do. Tests start nodes on tokio's clock.
        let clock: Arc<dyn idmint_core::Clock> = Arc::new(idmint_core::CoarseClock::new());
        let node = Node::start_with_clock(file.node, authority, clock).await?;
        // Once, on stdout, where scripts and tests wait for it (not also as a log line).
        say(format_args!("idmint listening on {scheme}://{addr}"));
        let shutdown = Shutdown::new();
        let signals = tokio::spawn(signal_stages(shutdown.clone()));
        let mut front_ends: Vec<idmint_node::FrontEnd> =
            vec![Box::pin(idmint_node::http::listen::listen_with_tls(
                node.clone(),
                listener,
                tls.clone(),
                shutdown.clone(),
            ))];
        if let Some(grpc) = grpc {
            say(format_args!(
                "idmint gRPC listening on {}",
                grpc.local_addr()?
            ));
            front_ends.push(Box::pin(idmint_node::grpc::serve::serve_with_tls(
                node.clone(),
                grpc,
                tls.clone(),
                shutdown.clone(),
            )));
        }
        if let Some(resp) = resp {
            say(format_args!(
                "idmint RESP listening on {}",
                resp.local_addr()?
            ));
            let (node, shutdown, tls) = (node.clone(), shutdown.clone(), tls.clone());
            front_ends.push(Box::pin(async move {
                idmint_node::resp::serve_with_tls(node, resp, tls, shutdown)
                    .await
                    .map_err(idmint_node::NodeError::from)
            }));
        }
        let served = idmint_node::serve_front_ends(node, shutdown, front_ends).await;
        signals.abort();
        if let Some(node_record) = opened_record {
            if let Err(e) = node_record.flush().await {
                tracing::warn!(error = %e, "could not write the node record at shutdown");
            }
        }
        let report = served?;
        say(format_args!(
            "idmint stopped: {} ids handed back, {} burned",
            report.given_back, report.burned
        ));
        Ok(())
    })
}

/// Refuses to listen on an address other than loopback without `[auth]`, unless
/// `insecure_no_auth` (then warns). `listeners`: each flag and the addresses it would bind.
fn check_exposure<'a>(
    file: &FileConfig,
    listeners: impl IntoIterator<Item = (&'a str, Option<&'a [SocketAddr]>)>,
    insecure_no_auth: bool,
) -> Result<()> {
    if file.node.auth.is_some() {
        return Ok(());
    }
    for (flag, addrs) in listeners {
        let Some(exposed) = addrs.unwrap_or(&[]).iter().find(|a| !a.ip().is_loopback()) else {
            continue;
        };
        if insecure_no_auth {
            tracing::warn!(
                address = %exposed,
                "{flag} is not loopback and there is no [auth]: anyone who reaches it may create \
                 namespaces and take ids (--insecure-no-auth)"
            );
        } else {
            bail!(
                "{flag} {exposed} is not a loopback address and the configuration has no [auth]: \
                 anyone who can reach the port could create namespaces and take ids. Add [auth] \
                 with tokens to the configuration (idmint token new prints one), or pass \
                 --insecure-no-auth to serve without authentication anyway"
            );
        }
    }
    Ok(())
}

/// The addresses of `flag`'s `HOST:PORT` value, at least one (`example` for the error).
async fn resolve(flag: &str, value: &str, example: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(value)
        .await
        .with_context(|| {
            format!("{flag} {value}: cannot resolve it; give HOST:PORT, e.g. {example}")
        })?
        .collect();
    if addrs.is_empty() {
        bail!("{flag} {value}: the name resolves to no address");
    }
    Ok(addrs)
}

/// An optional listener's address: `flag`'s value (resolved), else the file's; `None`: off.
async fn optional_address(
    flag: &str,
    value: Option<String>,
    file: Option<SocketAddr>,
    example: &str,
) -> Result<Option<(String, Vec<SocketAddr>)>> {
    match value {
        Some(value) => {
            let addrs = resolve(flag, &value, example).await?;
            Ok(Some((value, addrs)))
        }
        None => Ok(file.map(|addr| (addr.to_string(), vec![addr]))),
    }
}

/// Binds the first of `addrs` (those of `value`, the `what` address) that accepts.
async fn bind_first(what: &str, value: &str, addrs: &[SocketAddr]) -> Result<TcpListener> {
    let mut failures = Vec::new();
    for addr in addrs {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) => failures.push(format!("{addr}: {e}")),
        }
    }
    bail!("binding {what} on {value}: {}", failures.join("; "))
}

/// Prints a status line on stdout, now (the tests and scripts wait for it). Errors are
/// ignored: nobody reading our stdout is no reason to stop serving.
fn say(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(args);
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
}

/// Moves `shutdown` on at each Ctrl-C or SIGTERM: the first drains, the second stops at once.
async fn signal_stages(shutdown: Shutdown) {
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for Ctrl-C and SIGTERM");
            return;
        }
    };
    signals.next().await;
    tracing::info!(
        "signal received: draining (a second Ctrl-C or SIGTERM stops at once, still handing back)"
    );
    shutdown.drain();
    signals.next().await;
    tracing::warn!("second signal: stopping now");
    shutdown.stop_now();
}

/// Ctrl-C (SIGINT) and SIGTERM, as one stream of signals.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers now and keeps them, so a signal arriving between two waits is
    /// not lost.
    fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next Ctrl-C or SIGTERM.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

/// Logs each multi-authority member's transitions, once each way (never once per request).
#[derive(Debug)]
struct LogMembers;

impl idmint_store::MemberEvents for LogMembers {
    fn changed(&self, m: &idmint_store::MemberHealth) {
        if m.up {
            tracing::info!(
                member = m.number,
                kind = m.kind,
                offset = m.offset,
                "authority member is back; serving its residue class again"
            );
        } else {
            tracing::warn!(
                member = m.number,
                kind = m.kind,
                offset = m.offset,
                error = m.last_error.as_deref().unwrap_or("unknown"),
                "authority member is down; the others serve meanwhile, it is retried"
            );
        }
    }
}
