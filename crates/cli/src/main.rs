//! `idmint`: the command line of idmint. Argument parsing, file and environment reading, and
//! printing; everything of substance is in the libraries (`idmint-node`, `idmint-store`,
//! `idmint-core`).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use idmint_api::{Decoded, ErrorBody, IdsResponse, NamespaceInfo, NamespaceList};
use idmint_core::{Layout, Ulid, Uuid7};
use idmint_node::FileConfig;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::path::PathBuf;

const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";

#[derive(Parser)]
#[command(
    name = "idmint",
    version,
    about = "Unique ids for sharded databases: sequences from leased blocks, snowflake, UUIDv7 and ULID.",
    after_help = "Examples:\n  idmint serve --config idmint.toml\n  idmint next photos -n 5\n  idmint decode 1212161076890996736 --layout twitter\n  idmint status"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: HTTP/JSON API over an embedded durable store.
    #[command(
        after_help = "Examples:\n  idmint serve\n  idmint serve --config idmint.toml\n  idmint serve --data-dir /var/lib/idmint --http 0.0.0.0:7878\n\nWith no arguments: file authority in ./idmint-data, HTTP on 127.0.0.1:7878, 64-bit\nsequence namespaces created on first use. Stop with Ctrl-C or SIGTERM: requests in\nflight are answered and unused ids are handed back. Logs: RUST_LOG=debug for more."
    )]
    Serve {
        /// TOML configuration file (namespaces, authority, server settings); see docs/configuration.md.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Directory of the embedded file authority [default: ./idmint-data].
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// HTTP listen address [default: 127.0.0.1:7878].
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
    },
    /// Fetch ids from a running node.
    #[command(
        after_help = "Examples:\n  idmint next photos\n  idmint next photos -n 5\n  idmint next tweets --server http://10.0.0.5:7878"
    )]
    Next {
        /// Namespace name.
        namespace: String,
        /// How many ids.
        #[arg(short = 'n', long, default_value_t = 1)]
        count: u64,
        /// Node URL.
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
    /// Decode an id: offline for a layout, or by a node for one of its namespaces.
    #[command(
        after_help = "Examples:\n  idmint decode 1212161076890996736 --layout twitter\n  idmint decode 01ARZ3NDEKTSV4RRFFQ69G5FAV --layout ulid\n  idmint decode 3150021346451456 --namespace tweets\n\nLayouts: twitter, instagram, sonyflake, discord, js53, uuid7, ulid."
    )]
    Decode {
        /// The id (decimal, or UUID/ULID text).
        id: String,
        /// Decode offline with this layout.
        #[arg(
            long,
            conflicts_with = "namespace",
            required_unless_present = "namespace"
        )]
        layout: Option<String>,
        /// Ask the node to decode it as an id of this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Node URL (with --namespace).
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
    /// Print SQL: the authority's schema, Flickr ticket tables, Instagram's next_id() function.
    #[command(
        subcommand,
        after_help = "Examples:\n  idmint sql postgres\n  idmint sql postgres --instagram --schema shard_5 --shard 5\n  idmint sql mysql\n  idmint sql mysql --tickets photos --servers 2"
    )]
    Sql(SqlCommand),
    /// Show a node's namespaces and their state as a table.
    #[command(after_help = "Example:\n  idmint status --server http://127.0.0.1:7878")]
    Status {
        /// Node URL.
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: String,
    },
}

#[derive(Subcommand)]
enum SqlCommand {
    /// PostgreSQL: the authority's table, or Instagram's PL/pgSQL next_id() for one logical shard.
    #[command(
        after_help = "Examples:\n  idmint sql postgres | psql -U postgres idmint\n  idmint sql postgres --instagram --schema shard_5 --shard 5 --epoch 1314220021721\n\nThe Instagram function computes (now_ms - epoch) << 23 | shard << 10 | nextval % 1024,\nthe same ids as idmint's `instagram` layout."
    )]
    Postgres {
        /// Table of the authority.
        #[arg(long, default_value = idmint_store::postgres::PostgresConfig::DEFAULT_TABLE, conflicts_with = "instagram")]
        table: String,
        /// Print Instagram's id function instead (needs --schema and --shard).
        #[arg(long, requires_all = ["schema", "shard"])]
        instagram: bool,
        /// Schema holding the shard's sequence and function.
        #[arg(long, requires = "instagram")]
        schema: Option<String>,
        /// Logical shard id, 0 to 8191.
        #[arg(long, requires = "instagram")]
        shard: Option<u64>,
        /// Epoch in Unix milliseconds [default: Instagram's, 1314220021721].
        #[arg(long, requires = "instagram")]
        epoch: Option<u64>,
    },
    /// MySQL/MariaDB: the authority's table, or Flickr ticket tables with my.cnf lines for N servers.
    #[command(
        after_help = "Examples:\n  idmint sql mysql | mysql idmint\n  idmint sql mysql --tickets photos --servers 2"
    )]
    Mysql {
        /// Table of the authority (block mode).
        #[arg(long, default_value = idmint_store::mysql::DEFAULT_TABLE, conflicts_with = "tickets")]
        table: String,
        /// Print the Flickr ticket table of this namespace and each server's my.cnf lines.
        #[arg(long, value_name = "NAMESPACE")]
        tickets: Option<String>,
        /// Number of ticket servers sharing the namespace.
        #[arg(long, default_value_t = 2, requires = "tickets")]
        servers: u32,
    },
}

fn sql(command: SqlCommand) -> Result<()> {
    let text = match command {
        SqlCommand::Postgres {
            instagram: true,
            schema: Some(schema),
            shard: Some(shard),
            epoch,
            ..
        } => {
            let epoch = epoch.unwrap_or(Layout::instagram().spec().epoch_unix_ms);
            idmint_store::postgres::instagram_sql(&schema, shard, epoch)?
        }
        SqlCommand::Postgres {
            instagram: true, ..
        } => bail!("--instagram needs --schema and --shard"),
        SqlCommand::Postgres { table, .. } => idmint_store::postgres::schema_sql(&table),
        SqlCommand::Mysql {
            tickets: Some(ns),
            servers,
            ..
        } => {
            if servers == 0 {
                bail!("--servers must be at least 1");
            }
            let ns = idmint_core::NamespaceName::new(&ns)?;
            idmint_store::mysql::ticket_sql(&ns, servers)
        }
        SqlCommand::Mysql { table, .. } => idmint_store::mysql::schema_sql(&table),
    };
    println!("{}", text.trim_end());
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            data_dir,
            http,
        } => serve(config, data_dir, http),
        Command::Next {
            namespace,
            count,
            server,
        } => {
            let answer: IdsResponse = get_json(&format!(
                "{}/v1/ids/{}?count={}",
                base(&server),
                namespace,
                count
            ))?;
            for id in answer.ids {
                println!("{id}");
            }
            Ok(())
        }
        Command::Decode {
            id,
            layout: Some(layout),
            ..
        } => decode_offline(&id, &layout),
        Command::Decode {
            id,
            namespace: Some(ns),
            server,
            ..
        } => {
            let decoded: Decoded = get_json(&format!("{}/v1/decode/{}/{}", base(&server), ns, id))?;
            println!("{}", serde_json::to_string_pretty(&decoded)?);
            Ok(())
        }
        Command::Decode { .. } => bail!("give --layout or --namespace"),
        Command::Status { server } => status(&server),
        Command::Sql(command) => sql(command),
    }
}

fn base(server: &str) -> &str {
    server.trim_end_matches('/')
}

fn serve(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    http: Option<SocketAddr>,
) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let file = match &config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            FileConfig::parse(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => FileConfig::parse("")?,
    };
    let http = http
        .or(file.http)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878)));
    let data_dir = data_dir
        .or(file.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from("idmint-data"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        if !file.authority.is_durable() {
            tracing::warn!(
                "memory authority: nothing survives a restart, ids WILL repeat after one"
            );
        }
        tracing::info!(authority = %file.authority, "connecting the authority");
        let authority = idmint_store::connect(&file.authority, &data_dir)
            .await
            .context("setting up the authority")?;
        let listener = tokio::net::TcpListener::bind(http)
            .await
            .with_context(|| format!("binding HTTP on {http}"))?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "idmint listening: HTTP http://{addr}/v1/ids/NAMESPACE");
        println!("idmint listening on http://{addr}");
        let report = idmint_node::run(listener, file.node, authority, shutdown_signal()).await?;
        println!(
            "idmint stopped: {} ids handed back, {} burned",
            report.given_back, report.burned
        );
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// GETs `url` and reads the answer as `T`, or the API's error body as an error.
fn get_json<T: DeserializeOwned>(url: &str) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let resp = reqwest::get(url)
            .await
            .with_context(|| format!("cannot reach {url}; is `idmint serve` running?"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(body) => bail!("{status} {}: {}", body.error.code, body.error.message),
                Err(_) => bail!("{url} answered {status}: {text}"),
            }
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{url} answered {status} with an unexpected body: {text}"))
    })
}

fn decode_offline(id: &str, layout: &str) -> Result<()> {
    match layout {
        "uuid7" => {
            let u: Uuid7 = id
                .parse()
                .with_context(|| format!("{id:?} is not a UUIDv7"))?;
            println!(
                "uuid7 {u}\ntimestamp {} ({} ms)",
                fmt_ms(u.unix_millis()),
                u.unix_millis()
            );
        }
        "ulid" => {
            let u: Ulid = id
                .parse()
                .with_context(|| format!("{id:?} is not a ULID"))?;
            println!(
                "ulid {u}\ntimestamp {} ({} ms)",
                fmt_ms(u.unix_millis()),
                u.unix_millis()
            );
        }
        name => {
            let l = Layout::preset(name).map_err(|e| anyhow!("{e} (or uuid7, ulid)"))?;
            let n: u64 = id
                .parse()
                .with_context(|| format!("{id:?} is not a decimal 64-bit id"))?;
            let d = l.decode(n)?;
            println!(
                "layout    {name}\nid        {n}\ntimestamp {} ({} ms since 1970)\nnode      {}\nsequence  {}",
                d.rfc3339(),
                d.unix_millis(),
                d.parts.node,
                d.parts.sequence
            );
        }
    }
    Ok(())
}

fn fmt_ms(ms: u64) -> String {
    idmint_core::layout::Decoded {
        parts: idmint_core::Parts {
            timestamp: 0,
            node: 0,
            sequence: 0,
        },
        unix_nanos: ms.saturating_mul(1_000_000),
    }
    .rfc3339()
}

fn status(server: &str) -> Result<()> {
    let list: NamespaceList = get_json(&format!("{}/v1/namespaces", base(server)))?;
    if list.namespaces.is_empty() {
        println!("no namespaces served yet (sequence namespaces appear on first use)");
        return Ok(());
    }
    let rows: Vec<[String; 6]> = list.namespaces.iter().map(status_row).collect();
    let header = [
        "NAMESPACE",
        "KIND",
        "WATERMARK",
        "BUFFERED",
        "DEMAND",
        "SPACE",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", line(&header.map(String::from)));
    for r in &rows {
        println!("{}", line(r));
    }
    Ok(())
}

/// One row of `idmint status`: name, kind, watermark, buffered, demand, space.
fn status_row(ns: &NamespaceInfo) -> [String; 6] {
    let dash = || "-".to_owned();
    match ns {
        NamespaceInfo::Sequence {
            namespace,
            settings,
            state,
        } => [
            namespace.clone(),
            format!("sequence/{}", settings.width),
            state.watermark.to_string(),
            state.ids_buffered.to_string(),
            format!("{:.0}/s", state.demand_per_second),
            format!(
                "{:.4}% used{}",
                state.used_fraction * 100.0,
                state
                    .projected_exhaustion
                    .as_deref()
                    .map(|d| format!(", full {d}"))
                    .unwrap_or_default()
            ),
        ],
        NamespaceInfo::Snowflake {
            namespace,
            settings,
            state,
        } => [
            namespace.clone(),
            "snowflake".into(),
            dash(),
            dash(),
            format!("{} served", state.ids_served),
            format!(
                "worker {}, time runs out {}",
                settings.worker, state.time_runs_out
            ),
        ],
        other => [
            other.name().to_owned(),
            other.kind().to_owned(),
            dash(),
            dash(),
            dash(),
            dash(),
        ],
    }
}
