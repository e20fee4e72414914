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
//! With TLS (`--tls-cert`/`--tls-key`, `[server] tls_cert`/`tls_key`; and `--tls-client-ca` or
//! `client_ca_file` for mutual TLS) every listener is served through one
//! [`idmint_node::tls::ServerTls`]. SIGHUP reloads its files and the `[auth]` tokens of the
//! configuration file ([`reload_on_sighup`]): new connections get the new certificate, open
//! ones keep theirs, a removed token is refused at its next request, and files that do not
//! load leave the ones in use.
//!
//! Logs go to stderr: `--log-format text` (the default) colours them only when stderr is a
//! terminal; `--log-format json` writes one JSON object per line for log shippers.

use anyhow::{bail, Context, Result};
use idmint_node::logs::LogSink;
use idmint_node::{FileConfig, Node, Server, Shutdown};
use std::io::IsTerminal;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// Installs the log subscriber: `RUST_LOG` (default `info`), in `format`, on stderr through
/// a [`LogSink`]: a slow, stalled or closed reader of stderr never blocks or stops the node
/// (its lines are dropped and counted).
fn init_logs(format: LogFormat) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let sink = LogSink::stderr().context("starting the log writer")?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || sink.line());
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
    Ok(())
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

/// TLS on every listener (HTTP, gRPC, RESP), overriding `[server] tls_cert` / `tls_key` /
/// `client_ca_file`.
#[derive(Debug, Default, clap::Args)]
pub struct TlsFlags {
    /// Serve every listener over TLS with this certificate chain (PEM, leaf first)
    /// [default: server.tls_cert in the config file, else no TLS]; needs --tls-key. SIGHUP
    /// reloads it.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert [default: server.tls_key].
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: every listener requires a client certificate signed by a CA of this PEM
    /// file [default: server.client_ca_file, else no client certificate asked for]; needs TLS.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
}

/// The listeners' TLS: the flags' files, else the config file's (`--tls-client-ca` over
/// `client_ca_file`); loaded now, so a bad certificate, key or client CA stops the node before
/// it touches the authority, naming the file.
fn server_tls(flags: TlsFlags, file: &FileConfig) -> Result<Option<idmint_node::tls::ServerTls>> {
    let files = match (flags.tls_cert, flags.tls_key) {
        (Some(cert), Some(key)) => Some(idmint_node::TlsFiles {
            cert,
            key,
            client_ca: file.tls.as_ref().and_then(|t| t.client_ca.clone()),
        }),
        _ => file.tls.clone(),
    };
    let Some(mut files) = files else {
        if flags.tls_client_ca.is_some() {
            bail!("--tls-client-ca needs TLS: give --tls-cert and --tls-key (or server.tls_cert and tls_key)");
        }
        return Ok(None);
    };
    if let Some(ca) = flags.tls_client_ca {
        files.client_ca = Some(ca);
    }
    let tls = idmint_node::tls::ServerTls::from_files(&files).context(
        "loading the TLS certificate, key and client CA (--tls-cert/--tls-key/--tls-client-ca, \
         server.tls_cert/tls_key/client_ca_file)",
    )?;
    match &files.client_ca {
        Some(ca) => tracing::info!(
            cert = %files.cert.display(),
            client_ca = %ca.display(),
            "TLS on every listener, client certificates required"
        ),
        None => tracing::info!(cert = %files.cert.display(), "TLS on every listener"),
    }
    Ok(Some(tls))
}

/// On every SIGHUP, reloads what can change without a restart: the listeners' certificate,
/// key and client CA (new handshakes use the new files, open connections keep theirs), and the
/// `[auth]` tokens of the configuration file (a caller whose token is gone is refused at its
/// next request). What does not load is logged as an error naming the file, and what is in use
/// stays. Removing `[auth]` altogether needs a restart, where the exposure check runs. The
/// handler is registered when this is called, so call it before the node says it listens:
/// from then on a SIGHUP never stops the node (the signal's default action).
fn reload_on_sighup(
    tls: Option<idmint_node::tls::ServerTls>,
    node: Arc<Node>,
    config: Option<PathBuf>,
) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        {
            let mut hangups = match hangups {
                Ok(hangups) => hangups,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGHUP: TLS files and tokens will not be reloaded");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
                reload_tls(tls.as_ref()).await;
                reload_tokens(&node, config.as_deref());
            }
        }
        #[cfg(not(unix))]
        drop((tls, node, config));
    }
}

/// The TLS half of a SIGHUP.
async fn reload_tls(tls: Option<&idmint_node::tls::ServerTls>) {
    let Some(tls) = tls else {
        tracing::info!("SIGHUP: no TLS files to reload");
        return;
    };
    let reloading = tls.clone();
    let reloaded = tokio::task::spawn_blocking(move || reloading.reload()).await;
    let files = tls.files();
    let cert = files
        .map(|f| f.cert.display().to_string())
        .unwrap_or_default();
    let key = files
        .map(|f| f.key.display().to_string())
        .unwrap_or_default();
    let client_ca = files
        .and_then(|f| f.client_ca.as_ref())
        .map_or_else(|| "none".to_owned(), |ca| ca.display().to_string());
    match reloaded {
        Ok(Ok(())) => tracing::info!(
            %cert,
            %key,
            %client_ca,
            "SIGHUP: reloaded the TLS certificate, key and client CA; new connections use them"
        ),
        Ok(Err(e)) => tracing::error!(
            error = %e,
            "SIGHUP: TLS files not reloaded, still serving the previous certificate"
        ),
        Err(e) => tracing::error!(error = %e, "SIGHUP: the TLS reload task failed"),
    }
}

/// The `[auth]` half of a SIGHUP: the configuration file read again, its tokens installed.
fn reload_tokens(node: &Node, config: Option<&Path>) {
    let Some(path) = config else {
        return;
    };
    let file = match load_config(Some(path)) {
        Ok(file) => file,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "SIGHUP: tokens not reloaded, the configuration does not load; the tokens in use stay");
            return;
        }
    };
    match file.node.auth {
        Some(auth) => {
            let tokens = auth.tokens.len();
            node.auth().reload(Some(auth));
            tracing::info!(config = %path.display(), tokens, "SIGHUP: reloaded the [auth] tokens");
        }
        None if node.auth().enabled() => tracing::error!(
            config = %path.display(),
            "SIGHUP: the configuration has no [auth] now; removing authentication needs a restart, the tokens in use stay"
        ),
        None => {}
    }
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
    init_logs(log_format)?;
    let mut file = load_config(config.as_deref())?;
    let tls = server_tls(tls, &file)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let data_dir = resolve_data_dir(data_dir, &file)?;
    // Unused blocks that cannot go back at a clean stop are kept beside the node record.
    if file.authority.is_durable() {
        file.node.keep_blocks = Some(idmint_node::KeepBlocks {
            dir: data_dir.clone(),
            authority: file.authority.to_string(),
        });
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
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
        tracing::info!(data_dir = %data_dir.display(), "data directory");
        // The store, checked against this node's record (docs/uniqueness.md).
        let authority = idmint_node::open_store_or_later(&file, &data_dir, init).await?;
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
        // listen. The process-wide coarse clock: snowflake, UUIDv7 and ULID namespaces read
        // time with one atomic load on the hot path (re-reading the precise clock before they
        // would wait), as the library's default generators do. Tests start nodes on tokio's
        // clock.
        let clock: Arc<dyn idmint_core::Clock> = Arc::new(idmint_core::CoarseClock::new());
        let node = Node::start_with_clock(file.node, authority, clock).await?;
        let reloads = tokio::spawn(reload_on_sighup(tls.clone(), node.clone(), config));
        let mut server = Server::new(node).tls(tls).http(listener);
        // Once, on stdout, where scripts and tests wait for it (not also as a log line).
        say(format_args!("idmint listening on {scheme}://{addr}"));
        if let Some(grpc) = grpc {
            say(format_args!(
                "idmint gRPC listening on {}",
                grpc.local_addr()?
            ));
            server = server.grpc(grpc);
        }
        if let Some(resp) = resp {
            say(format_args!(
                "idmint RESP listening on {}",
                resp.local_addr()?
            ));
            server = server.resp(resp);
        }
        let signals = tokio::spawn(signal_stages(server.shutdown_handle()));
        let served = server.serve().await;
        signals.abort();
        reloads.abort();
        let report = served?;
        say(format_args!(
            "idmint stopped: {} ids handed back, {} kept in the data directory, {} burned",
            report.given_back, report.kept, report.burned
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
