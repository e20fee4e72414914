//! `idmint`: the command line of idmint. Argument parsing, file and environment reading, and
//! printing; everything of substance is in the libraries (`idmint-node`, `idmint-store`,
//! `idmint-core`).
//!
//! Modules: `serve` runs a node; `client` talks to one over HTTP or HTTPS (`next`, `status`,
//! `decode --namespace`, `admin rebase`, `admin retire`; `--ca-file`, `--cert`, `--key`); `decode` decodes ids and keys (`decode`, `shard-for`); `packaging` generates shell completions and
//! manual pages from this definition; `output` is the buffered stdout of the client
//! commands and the error report. Exit codes: 0 on success (also when the reader of stdout
//! goes away early, `| head`), 1 for an error (printed as `error:` and `caused by:` lines,
//! never a backtrace), 2 for a usage error (clap's).

mod admin;
mod audit;
mod client;
mod decode;
mod output;
mod packaging;
mod serve;
mod token;

use anyhow::{anyhow, bail, Result};
use clap::{Parser, Subcommand};
use client::{Client, ServerUrl, TlsArgs};
use decode::Decoder;
use idmint_api::{IdsResponse, NamespaceInfo, NamespaceList};
use idmint_core::Layout;
use output::Out;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";

/// The most ticket servers `idmint sql mysql --servers` takes: MySQL's largest
/// `auto_increment_increment` (each server steps by the number of servers).
const MAX_TICKET_SERVERS: i64 = 65_535;

#[derive(Parser)]
#[command(
    name = "idmint",
    version,
    about = "Unique ids for sharded databases: sequences from leased blocks, snowflake, UUIDv7 and ULID.",
    after_help = "Examples:\n  idmint serve --config idmint.toml\n  idmint next photos -n 5\n  idmint next photos -n 5 --server localhost:7878\n  idmint decode 1212161076890996736 --layout twitter\n  idmint next tweets -n 100 | idmint decode --namespace tweets\n  idmint status\n\nExit status: 0 on success (also when the reader of stdout stops early, as `| head`),\n1 on an error, 2 on a usage error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: HTTP/JSON API over an embedded durable store.
    #[command(
        after_help = "Examples:\n  idmint serve\n  idmint serve --config idmint.toml\n  idmint serve --config idmint.toml --http 0.0.0.0:7878   (idmint.toml with [auth] tokens: see idmint token new)\n  idmint serve --http localhost:7878\n  idmint serve --grpc 127.0.0.1:7879\n  idmint serve --resp 127.0.0.1:7380   (then: redis-cli -p 7380 INCR photos)\n\nWith no arguments: file authority in $XDG_DATA_HOME/idmint (else ~/.local/share/idmint),\nHTTP on 127.0.0.1:7878, 64-bit sequence namespaces created on first use, no authentication.\nWithout [auth] anyone who reaches a port may create namespaces and take ids, so a\nnon-loopback --http, --grpc or --resp is refused unless the configuration has [auth] or\n--insecure-no-auth is given. Stop with Ctrl-C or SIGTERM: requests in\nflight are answered and unused ids are handed back. With TLS, SIGHUP reloads the\ncertificate, key and client CA (open connections are kept). Logs: RUST_LOG=debug for more."
    )]
    Serve {
        /// TOML configuration file (namespaces, authority, server settings); see docs/configuration.md.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Data directory: the embedded file authority and the node record
        /// [default: $XDG_DATA_HOME/idmint, else ~/.local/share/idmint].
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// This is a new deployment: start although the store is empty and the configuration
        /// declares namespaces (without it, that is refused as a store that moved). Also set
        /// by IDMINT_INIT=true (a unit's or a pod's first start).
        #[arg(long, env = "IDMINT_INIT")]
        init: bool,
        /// HTTP listen address, HOST:PORT with a name or an address (localhost:7878,
        /// 0.0.0.0:7878; an address other than loopback needs an auth section in the configuration, or
        /// --insecure-no-auth) [default: 127.0.0.1:7878].
        #[arg(long, value_name = "HOST:PORT")]
        http: Option<String>,
        /// Also serve the gRPC API (idmint.v1, docs/grpc.md) on HOST:PORT, e.g.
        /// 127.0.0.1:7879 [default: server.grpc in the config file, else off].
        #[arg(long, value_name = "HOST:PORT")]
        grpc: Option<String>,
        /// Also speak the Redis protocol (RESP2/RESP3, docs/resp.md) on HOST:PORT, e.g.
        /// 127.0.0.1:7380, so any Redis client gets ids with INCR [default: server.resp in the
        /// config file, else off].
        #[arg(long, value_name = "HOST:PORT")]
        resp: Option<String>,
        #[command(flatten)]
        tls: serve::TlsFlags,
        /// Log lines on stderr: text (coloured only on a terminal) or json (one object per line,
        /// for log shippers).
        #[arg(long, value_enum, default_value_t = serve::LogFormat::Text)]
        log_format: serve::LogFormat,
        /// Serve on addresses other than loopback without an auth section: anyone who reaches the ports
        /// may create namespaces and take ids. For a network that is private already.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Bearer tokens for the auth section of the configuration.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Fetch ids from a running node.
    #[command(
        after_help = "Examples:\n  idmint next photos\n  idmint next photos -n 5\n  idmint next photos --shard 1341   (a namespace with shards = \"owned\")\n  idmint next photos --shard-key 31341   (the shard of key 31341)\n  idmint next tweets --server http://10.0.0.5:7878\n  idmint next tweets --server 10.0.0.5:7878   (no scheme: http://)\n  idmint next photos --server https://ids.internal:7878 --ca-file /etc/idmint/tls/ca.pem\n  idmint next photos -n 10000 > ids.txt"
    )]
    Next {
        /// Namespace name.
        namespace: String,
        /// How many ids; more than 10,000 are fetched in requests of 10,000.
        #[arg(short = 'n', long, default_value_t = 1)]
        count: u64,
        /// The data's shard the ids carry (a namespace with shards = "owned").
        #[arg(long, conflicts_with = "shard_key")]
        shard: Option<u64>,
        /// A key whose shard the ids carry: key % the namespace's logical_shards.
        #[arg(long = "shard-key", id = "shard_key", value_name = "KEY")]
        shard_key: Option<u64>,
        /// Node URL; without a scheme, http:// (127.0.0.1:7878, localhost:7878).
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: ServerUrl,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Decode ids: offline for a layout, or by a node for one of its namespaces.
    #[command(after_help = "Examples:
  idmint decode 1212161076890996736 --layout twitter
  idmint decode 01ARZ3NDEKTSV4RRFFQ69G5FAV --layout ulid
  idmint decode 3150021346451456 --namespace tweets
  idmint next tweets -n 1000 | idmint decode --namespace tweets --json
  idmint decode --layout instagram --epoch 1314220021721 < ids.txt
  idmint decode 1212161076890996736 --bits 41,10,12 --unit 1ms --epoch 1288834974657
  idmint decode 42-1007 --layout composite
  idmint decode 1000013 --step 4 --offsets 1,2,3

Layouts: twitter, instagram, sonyflake, discord, js53, uuid7, ulid; or --bits for a custom one
(field widths from the top: timestamp, node, sequence); composite for a SHARD-LOCAL key
(decimal parts, no sign, no leading zero). --step gives an id's residue class (id % step), and
with --offsets (the members' offsets in configuration order) the member owning it, from 1.
One ID prints one labelled line per field. Without an ID, ids are read from standard input,
one per line, and each prints one line: the values of the one-id output after kind and
layout (or namespace), separated by tabs. --json prints one JSON object per id instead.
The first id that cannot be decoded stops the command (exit 1), naming its line.")]
    Decode {
        /// The id (decimal, or UUID/ULID text). Without it: ids from standard input, one per line.
        id: Option<String>,
        /// Decode offline with this layout.
        #[arg(long, conflicts_with_all = ["namespace", "bits", "step"], required_unless_present_any = ["namespace", "bits", "step"])]
        layout: Option<String>,
        /// Decode offline with a custom layout: bits of timestamp, node and sequence.
        #[arg(long, value_name = "TS,NODE,SEQ", conflicts_with_all = ["namespace", "step"])]
        bits: Option<String>,
        /// Decode offline as an id of a sequence stepping by N (a step/offset namespace, a
        /// multi authority, MySQL's auto_increment_increment): its residue class, id % N.
        #[arg(long, value_name = "N", conflicts_with_all = ["namespace", "epoch"])]
        step: Option<u64>,
        /// With --step: the offsets of the members in configuration order (a multi
        /// authority's, or each ticket server's auto_increment_offset), to name the member
        /// owning the id's residue class.
        #[arg(long, value_name = "A,B,...", requires = "step")]
        offsets: Option<String>,
        /// Time unit of a --bits layout: us, ms or s, e.g. 10ms [default: 1ms].
        #[arg(long, requires = "bits", value_parser = decode::parse_unit)]
        unit: Option<Duration>,
        /// Epoch in Unix milliseconds, replacing the layout's (e.g. the --epoch given to
        /// `idmint sql postgres --instagram`) [default: the preset's; 0 with --bits].
        #[arg(long, value_name = "MS", conflicts_with = "namespace")]
        epoch: Option<u64>,
        /// Ask the node to decode it as an id of this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// One JSON object per id (for --namespace, the node's answer).
        #[arg(long)]
        json: bool,
        /// Node URL (with --namespace); without a scheme, http:// [default: http://127.0.0.1:7878].
        // Text until --namespace needs it: a stray $IDMINT_SERVER must not break offline decoding.
        #[arg(long, env = "IDMINT_SERVER")]
        server: Option<String>,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// The shard a key routes to among N logical shards: key % N (Instagram's user_id %
    /// logical_shards).
    #[command(after_help = "Examples:
  idmint shard-for --shards 2000 31341
  cut -f1 users.tsv | idmint shard-for --shards 2000 --json

One KEY prints labelled lines; without it, keys are read from standard input, one per line,
and each prints key, shards and shard separated by tabs. The shard an id already names is
read with `idmint decode ID --layout instagram` (its shard field).")]
    ShardFor {
        /// The key (a decimal 64-bit number, e.g. a user id). Without it: keys from standard
        /// input, one per line.
        key: Option<String>,
        /// The number of logical shards.
        #[arg(long, value_name = "N")]
        shards: u64,
        /// One JSON object per key.
        #[arg(long)]
        json: bool,
    },
    /// Print SQL: the authority's schema, Flickr ticket tables, Instagram's next_id() function.
    #[command(
        subcommand,
        after_help = "Examples:\n  idmint sql postgres\n  idmint sql postgres --instagram --schema shard_5 --shard 5\n  idmint sql mysql\n  idmint sql mysql --tickets photos --servers 2"
    )]
    Sql(SqlCommand),
    /// Operator actions: move a namespace's watermark up through a running node (rebase,
    /// retire; scope admin), or repair the authority offline (reseed).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Read the authority's audit ledger of every grant: verify it or export it.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Show a node's namespaces and their state as a table.
    #[command(
        after_help = "Examples:\n  idmint status --server http://127.0.0.1:7878\n  IDMINT_CA_FILE=/etc/idmint/tls/ca.pem idmint status --server https://ids.internal:7878\n  idmint status --server https://ids.internal:7878 --ca-file ca.pem --cert me.pem --key me.key   (mutual TLS)"
    )]
    Status {
        /// Node URL; without a scheme, http:// (127.0.0.1:7878, localhost:7878).
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: ServerUrl,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    #[command(
        after_help = "Examples:\n  idmint completions bash > /etc/bash_completion.d/idmint\n  idmint completions zsh > \"${fpath[1]}/_idmint\"\n  idmint completions fish > ~/.config/fish/completions/idmint.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into a directory.
    #[command(
        after_help = "Examples:\n  idmint man | man -l -\n  idmint man --out-dir /usr/local/share/man/man1   (idmint.1, idmint-serve.1, ...)"
    )]
    Man {
        /// Write idmint.1 and a page per subcommand (idmint-serve.1, ...) into this existing
        /// directory instead of printing idmint.1.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a new random token: prints it once, and the [[auth.tokens]] entry (its SHA-256, never
    /// the token) to put in idmint.toml.
    #[command(
        after_help = "Examples:\n  idmint token new --name orders-service\n  idmint token new --name eu-tier --role tier   (a lower tier's [authority] token)\n  idmint token new --name cluster --role peer   (every node's [peers] token)\n\nThen send it: curl -H 'Authorization: Bearer idmint_…' http://host:7878/v1/ids/orders"
    )]
    New {
        /// The token's name in metrics and messages [default: the first 12 hex digits of its
        /// hash].
        #[arg(long)]
        name: Option<String>,
        /// Who uses it, which sets its scopes: application (ids, blocks, workers, read), tier (the
        /// authority token of a lower tier: blocks, tier, read), peer (the peers token of the
        /// nodes of one cluster: peer), admin (rebase and retire: admin, read).
        #[arg(long, value_enum, default_value = "application")]
        role: token::Role,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Bring back a namespace refused as lost (a store that moved or lost data, a multi member
    /// taken out of service): set it up with its watermark above ID, so no id at or below ID
    /// is handed out again. Stop the node first; restart it after.
    #[command(
        after_help = "Examples:\n  idmint admin reseed orders --above 123456789 --config idmint.toml\n  idmint admin reseed orders --above 123456789 --config idmint.toml --member 2\n\nTake ID from your tables: the highest id of the namespace (with --member, of that\nmember's residue class) ever written. See docs/uniqueness.md."
    )]
    Reseed {
        /// Namespace name.
        namespace: String,
        /// The highest id that must never be handed out again.
        #[arg(long, value_name = "ID")]
        above: u64,
        /// The node's configuration file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The node's data directory (its node record; the file authority).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// With a multi authority: the member to re-seed, from 1 in config order.
        #[arg(long, value_name = "N")]
        member: Option<usize>,
    },
    /// Move a sequence namespace's watermark above ID through a running node, so that every
    /// id from now on is above it (importing a table: start above its highest id). Never
    /// down; repeatable. Needs the admin scope ($IDMINT_TOKEN). Recorded in the audit ledger.
    #[command(
        after_help = "Examples:\n  idmint admin rebase orders --above 123456789\n  IDMINT_TOKEN=idmint_… idmint admin rebase orders --above 123456789 --server https://ids.internal:7878\n\nThe node burns what it buffered below the new watermark. Other nodes of the same\nauthority serve what they already buffered until it runs out: stop or drain them first\nwhen the ids below must never appear again (an import)."
    )]
    Rebase {
        /// Namespace name.
        namespace: String,
        /// The highest id that must never be handed out.
        #[arg(long, value_name = "ID")]
        above: u64,
        /// Node URL; without a scheme, http:// (127.0.0.1:7878, localhost:7878).
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: ServerUrl,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Stop a sequence namespace for good: its watermark moves past its largest id, so it
    /// hands out no id any more, and its record stays so it is never created again. Needs the
    /// admin scope ($IDMINT_TOKEN). Recorded in the audit ledger. Cannot be undone.
    #[command(
        after_help = "Example:\n  idmint admin retire legacy_orders --yes --server http://127.0.0.1:7878"
    )]
    Retire {
        /// Namespace name.
        namespace: String,
        /// Confirm: retiring cannot be undone (without it, nothing is sent).
        #[arg(long)]
        yes: bool,
        /// Node URL; without a scheme, http:// (127.0.0.1:7878, localhost:7878).
        #[arg(long, env = "IDMINT_SERVER", default_value = DEFAULT_SERVER)]
        server: ServerUrl,
        #[command(flatten)]
        tls: TlsArgs,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Prove from the ledger that no id was granted twice and every watermark is above every
    /// grant (each member of a multi authority separately). Exit 1 on a violation. Reads only.
    #[command(
        after_help = "Examples:\n  idmint audit verify --config idmint.toml\n  idmint audit verify --data-dir /var/lib/idmint\n\nA file authority is locked by its running node: stop the node first. The networked\nauthorities (PostgreSQL, MySQL, etcd, ZooKeeper) can be verified while nodes serve."
    )]
    Verify {
        /// The node's configuration file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The node's data directory (the file authority).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Write every ledger entry: namespace (or lease group), order, time, event, its two
    /// numbers (start and end of a grant or give-back, worker and token of a lease, watermarks
    /// before and after a rebase or retirement) and the holder.
    #[command(
        after_help = "Examples:\n  idmint audit export --config idmint.toml > ledger.csv\n  idmint audit export --format json --namespace orders --config idmint.toml"
    )]
    Export {
        /// The node's configuration file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The node's data directory (the file authority).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// csv (with a header line) or json (one object per line).
        #[arg(long, value_enum, default_value = "csv")]
        format: audit::Format,
        /// Only this namespace or lease group.
        #[arg(long)]
        namespace: Option<String>,
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
        /// Number of ticket servers sharing the namespace, 1 to 65535 (MySQL's largest
        /// auto_increment_increment).
        #[arg(long, default_value_t = 2, requires = "tickets", value_parser = clap::value_parser!(u32).range(1..=MAX_TICKET_SERVERS))]
        servers: u32,
    },
}

fn sql(out: &mut Out, command: SqlCommand) -> Result<()> {
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
            // clap keeps it in 1..=MAX_TICKET_SERVERS.
            let ns = idmint_core::NamespaceName::new(&ns)?;
            idmint_store::mysql::ticket_sql(&ns, servers)
        }
        SqlCommand::Mysql { table, .. } => idmint_store::mysql::schema_sql(&table),
    };
    out.line(format_args!("{}", text.trim_end()))?;
    Ok(())
}

fn main() -> ExitCode {
    // Usage errors end here, with clap's message and exit code 2.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            data_dir,
            http,
            grpc,
            resp,
            tls,
            log_format,
            init,
            insecure_no_auth,
        } => serve::serve(
            config,
            data_dir,
            serve::Listeners {
                http,
                grpc,
                resp,
                tls,
            },
            log_format,
            init,
            insecure_no_auth,
        ),
        command => {
            let mut out = Out::new();
            let result = client_command(&mut out, command);
            // Whatever was decoded or fetched before an error is still printed.
            let flushed = out.flush();
            result.and_then(|()| Ok(flushed?))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            output::report(&e);
            ExitCode::FAILURE
        }
    }
}

/// The most ids `idmint next` asks for in one request: the node's default `server.max_count`.
const NEXT_PAGE: u64 = 10_000;

/// Every command but `serve`: they print through `out`.
fn client_command(out: &mut Out, command: Command) -> Result<()> {
    match command {
        Command::Serve { .. } => bail!("serve is not a client command"),
        Command::Next {
            namespace,
            count,
            shard,
            shard_key,
            server,
            tls,
        } => {
            let client = Client::new(server, &tls)?;
            let route = match (shard, shard_key) {
                (Some(shard), _) => Some(("shard", shard.to_string())),
                (None, Some(key)) => Some(("key", key.to_string())),
                (None, None) => None,
            };
            // Pages of at most the node's default `max_count`: one request per page, printed
            // as it arrives. A count of 0 is sent as it is, for the node's error.
            let mut left = count;
            loop {
                let page = left.min(NEXT_PAGE);
                let mut query = vec![("count", page.to_string())];
                query.extend(route.clone());
                let answer: IdsResponse = client.get(&["v1", "ids", &namespace], &query)?;
                for id in &answer.ids {
                    out.line(format_args!("{id}"))?;
                }
                let got = u64::try_from(answer.ids.len()).unwrap_or(u64::MAX);
                if got == 0 {
                    bail!("the node answered no ids for a request of {page}");
                }
                left = left.saturating_sub(got);
                if left == 0 {
                    return Ok(());
                }
            }
        }
        Command::Decode {
            id,
            layout,
            bits,
            unit,
            epoch,
            step,
            offsets,
            namespace,
            json,
            server,
            tls,
        } => {
            let decoder = match (layout, bits, namespace, step) {
                (None, None, None, Some(step)) => {
                    decode::residue_decoder(step, offsets.as_deref())?
                }
                (Some(layout), None, None, None) => decode::preset_decoder(&layout, epoch)?,
                (None, Some(bits), None, None) => Decoder::Snowflake {
                    name: "custom".to_owned(),
                    layout: decode::custom_layout(
                        &bits,
                        unit.unwrap_or(Duration::from_millis(1)),
                        epoch.unwrap_or(0),
                    )?,
                },
                (None, None, Some(namespace), None) => {
                    let server: ServerUrl = server
                        .as_deref()
                        .unwrap_or(DEFAULT_SERVER)
                        .parse()
                        .map_err(|e| anyhow!("--server: {e}"))?;
                    Decoder::Node {
                        client: Box::new(Client::new(server, &tls)?),
                        namespace,
                    }
                }
                // clap refuses these combinations first.
                _ => bail!("give one of --layout, --bits, --step or --namespace"),
            };
            decode::run(out, &decoder, id.as_deref(), json)
        }
        Command::ShardFor { key, shards, json } => decode::run(
            out,
            &decode::shard_for_decoder(shards)?,
            key.as_deref(),
            json,
        ),
        Command::Status { server, tls } => status(out, server, &tls),
        Command::Admin(AdminCommand::Reseed {
            namespace,
            above,
            config,
            data_dir,
            member,
        }) => {
            let line = admin::reseed(admin::Reseed {
                namespace,
                above,
                config,
                data_dir,
                member,
            })?;
            Ok(out.line(format_args!("{line}"))?)
        }
        Command::Admin(AdminCommand::Rebase {
            namespace,
            above,
            server,
            tls,
        }) => {
            let a: idmint_api::AdvanceResponse = Client::new(server, &tls)?.post(
                &["v1", "admin", "rebase", &namespace],
                &[("above", above.to_string())],
            )?;
            Ok(out.line(format_args!("{}", describe_advance(&a)))?)
        }
        Command::Admin(AdminCommand::Retire {
            namespace,
            yes,
            server,
            tls,
        }) => {
            if !yes {
                bail!(
                    "retiring {namespace:?} cannot be undone: it will hand out no id ever again \
                     and is never created again; run again with --yes to retire it"
                );
            }
            let a: idmint_api::AdvanceResponse =
                Client::new(server, &tls)?.post(&["v1", "admin", "retire", &namespace], &[])?;
            Ok(out.line(format_args!("{}", describe_advance(&a)))?)
        }
        Command::Audit(AuditCommand::Verify { config, data_dir }) => {
            let reports = audit::verify(&audit::Source { config, data_dir })?;
            let mut text = Vec::new();
            let clean = audit::print_report(&mut text, &reports)?;
            out.bytes(&text)?;
            let unreadable: Vec<&str> = reports
                .iter()
                .filter(|(_, r)| r.is_err())
                .map(|(label, _)| label.as_str())
                .collect();
            if !unreadable.is_empty() {
                bail!(
                    "the audit ledger of {} could not be read: nothing is proven about it",
                    unreadable.join(", ")
                );
            }
            if !clean {
                let n: usize = reports
                    .iter()
                    .filter_map(|(_, r)| r.as_ref().ok())
                    .map(|r| r.violations.len())
                    .sum();
                bail!("the audit ledger shows {n} violation(s): ids were granted twice, a watermark went back, or ids below a watermark are not accounted for");
            }
            Ok(())
        }
        Command::Audit(AuditCommand::Export {
            config,
            data_dir,
            format,
            namespace,
        }) => {
            let mut text = Vec::new();
            audit::export(
                &audit::Source { config, data_dir },
                format,
                namespace.as_deref(),
                &mut text,
            )?;
            Ok(out.bytes(&text)?)
        }
        Command::Sql(command) => sql(out, command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            Ok(out.bytes(&packaging::completions(Cli::command(), shell))?)
        }
        Command::Man { out_dir } => {
            use clap::CommandFactory;
            let pages = packaging::man_pages(Cli::command())?;
            match out_dir {
                Some(dir) => {
                    for path in packaging::write_pages(&dir, &pages)? {
                        out.line(format_args!("{path}"))?;
                    }
                    Ok(())
                }
                None => match pages.first() {
                    Some((_, roff)) => Ok(out.bytes(roff)?),
                    None => bail!("no manual page was generated"),
                },
            }
        }
        Command::Token(TokenCommand::New { name, role }) => {
            out.line(format_args!(
                "{}",
                token::new(name.as_deref(), role)?.trim_end()
            ))?;
            Ok(())
        }
    }
}

/// One line saying what a rebase or retirement did.
fn describe_advance(a: &idmint_api::AdvanceResponse) -> String {
    let moved = if a.watermark == a.previous_watermark {
        format!("watermark already {}; nothing changed", a.watermark)
    } else {
        format!("watermark {} -> {}", a.previous_watermark, a.watermark)
    };
    let state = if a.retired {
        "retired: it hands out no id any more".to_string()
    } else {
        format!("the next id is at or above {}", a.watermark)
    };
    format!(
        "namespace {} ({}): {moved}; {state}; {} buffered ids burned on this node",
        a.namespace, a.action, a.burned
    )
}

fn status(out: &mut Out, server: ServerUrl, tls: &TlsArgs) -> Result<()> {
    let list: NamespaceList = Client::new(server, tls)?.get(&["v1", "namespaces"], &[])?;
    if list.namespaces.is_empty() {
        out.line(format_args!(
            "no namespaces served yet (sequence namespaces appear on first use)"
        ))?;
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
    out.line(format_args!("{}", line(&header.map(String::from))))?;
    for r in &rows {
        out.line(format_args!("{}", line(r)))?;
    }
    Ok(())
}

/// One row of `idmint status`: name, kind, watermark, buffered, demand, space.
fn status_row(ns: &NamespaceInfo) -> [String; 6] {
    let dash = || "-".to_owned();
    match ns {
        NamespaceInfo::Sequence {
            namespace,
            auto_created,
            family,
            settings,
            state,
            ..
        } => [
            namespace.clone(),
            format!(
                "sequence/{}{}{}",
                settings.width,
                match family {
                    Some(f) => format!(" ({f})"),
                    None if *auto_created => " (auto)".to_owned(),
                    None => String::new(),
                },
                match &state.leader {
                    Some(l) if l.role == "leader" => " strict, leads".to_owned(),
                    Some(l) if l.role == "follower" =>
                        format!(" strict, forwards to {}", l.url.as_deref().unwrap_or("?")),
                    Some(_) => " strict, NO LEADER".to_owned(),
                    None => String::new(),
                }
            ),
            state.watermark.to_string(),
            state.ids_buffered.to_string(),
            format!("{:.0}/s", state.demand_per_second),
            if state.retired {
                "retired (hands out no id any more)".to_owned()
            } else {
                format!(
                    "{:.4}% used{}",
                    state.used_fraction * 100.0,
                    state
                        .projected_exhaustion
                        .as_deref()
                        .map(|d| format!(", full {d}"))
                        .unwrap_or_default()
                )
            },
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
            // A generator has no demand average to show (its headroom is in the last column).
            dash(),
            format!(
                "{} ids served, {} {}{}, time runs out {}",
                state.ids_served,
                settings.layout.node_field.as_str(),
                settings.worker,
                match &state.worker_lease {
                    Some(l) => format!(
                        " (lease {}, token {}, floor {})",
                        serde_json::to_value(l.status)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        l.token,
                        l.floor
                    ),
                    None => " (no lease)".to_owned(),
                },
                state.time_runs_out
            ) + &output::snowflake_foresight(&settings.layout.time_unit, state),
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
