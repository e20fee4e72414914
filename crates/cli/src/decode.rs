//! `idmint decode`: what an id says about itself, offline from a layout (a preset, with an
//! optional epoch override, or custom bits), a composite `shard-local` key, the residue class of
//! a step/offset sequence (with the member owning it), or by asking a node about one of its
//! namespaces; and `idmint shard-for`, the shard a key routes to (`key % shards`), read and
//! printed the same way.
//!
//! One id on the command line prints a labelled block; without one, ids are read from standard
//! input, one per line (blank lines skipped), and each prints one tab-separated row, so a file
//! of ids is decoded by one process. `--json` prints one JSON object per id instead (JSON
//! Lines): the node's `idmint_api::Decoded` for `--namespace`, the same shape offline. The
//! first id that cannot be decoded stops the command with an error naming its line; the rows
//! before it are printed.

use crate::client::Client;
use crate::output::Out;
use anyhow::{anyhow, bail, Context, Result};
use idmint_core::keys::{self, CompositeKey};
use idmint_core::{FieldOrder, Layout, LayoutSpec, Ulid, Uuid7};
use serde_json::{json, Map, Value};
use std::io::{BufRead, IsTerminal};
use std::num::NonZeroU64;
use std::time::Duration;

/// How ids are decoded.
pub enum Decoder {
    /// Offline, with a snowflake layout. `name` is the preset's (or `custom`).
    Snowflake { name: String, layout: Layout },
    /// Offline, as UUIDv7 text.
    Uuid7,
    /// Offline, as ULID text.
    Ulid,
    /// Offline, as a composite `shard-local` key.
    Composite,
    /// Offline, as an id of a sequence stepping by `step`: its residue class and, with
    /// `offsets` (the members' in configuration order), the member owning it.
    Residue {
        step: NonZeroU64,
        offsets: Option<Vec<u64>>,
    },
    /// Offline, a key's shard among `shards` (`key % shards`).
    ShardFor { shards: NonZeroU64 },
    /// By a node, as an id of one of its namespaces.
    Node {
        client: Box<Client>,
        namespace: String,
    },
}

/// How decoded ids are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `label     value` lines: one id given as an argument.
    Block,
    /// The values of the fields, tab-separated, one line per id: ids from standard input.
    Row,
    /// One JSON object per line.
    Json,
}

/// One decoded id.
struct Record {
    /// What was asked (kind, layout or namespace): in blocks and JSON, not in rows.
    context: Vec<(&'static str, Value)>,
    /// What the id says: in every format.
    fields: Vec<(&'static str, Value)>,
    /// The JSON object of `--json`.
    json: Value,
}

impl Record {
    fn offline(context: Vec<(&'static str, Value)>, fields: Vec<(&'static str, Value)>) -> Record {
        let json = Value::Object(
            context
                .iter()
                .chain(&fields)
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<Map<_, _>>(),
        );
        Record {
            context,
            fields,
            json,
        }
    }
}

/// A layout from `--bits TS,NODE,SEQ` (node before sequence, as Twitter), `--unit` and the epoch.
pub fn custom_layout(bits: &str, unit: Duration, epoch_unix_ms: u64) -> Result<Layout> {
    let parsed: Vec<u8> = bits
        .split(',')
        .map(|b| b.trim().parse::<u8>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--bits {bits:?}: expected three bit counts, e.g. 41,10,12"))?;
    let [timestamp_bits, node_bits, sequence_bits] = parsed[..] else {
        bail!(
            "--bits {bits:?}: expected three bit counts (timestamp, node, sequence), e.g. 41,10,12"
        );
    };
    Layout::new(LayoutSpec {
        timestamp_bits,
        node_bits,
        sequence_bits,
        time_unit: unit,
        epoch_unix_ms,
        order: FieldOrder::NodeThenSequence,
        max_bits: 63,
    })
    .with_context(|| format!("--bits {bits}"))
}

/// A time unit: a whole number with `us`, `ms` or `s` (`1ms`, `10ms`, `1s`).
pub fn parse_unit(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit, e.g. 1ms, 10ms, 1s"))?;
    match suffix.trim() {
        "us" | "µs" => Ok(Duration::from_micros(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        other => Err(format!("{text:?}: unknown unit {other:?}; use us, ms or s")),
    }
}

/// `--step N [--offsets A,B,...]`: the offsets are distinct and below the step, as a multi
/// authority's members' are.
pub fn residue_decoder(step: u64, offsets: Option<&str>) -> Result<Decoder> {
    let step = NonZeroU64::new(step).context("--step must be at least 1")?;
    let offsets = match offsets {
        None => None,
        Some(text) => {
            let list: Vec<u64> = text
                .split(',')
                .map(|o| o.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .with_context(|| {
                    format!("--offsets {text:?}: expected offsets separated by commas, e.g. 1,2,3")
                })?;
            if let Some(o) = list.iter().find(|o| **o >= step.get()) {
                bail!("--offsets: offset {o} is not below --step {step}");
            }
            let mut sorted = list.clone();
            sorted.sort_unstable();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                bail!("--offsets: offset {} is given twice", w[0]);
            }
            Some(list)
        }
    };
    Ok(Decoder::Residue { step, offsets })
}

/// `idmint shard-for --shards N`.
pub fn shard_for_decoder(shards: u64) -> Result<Decoder> {
    let shards = NonZeroU64::new(shards).context("--shards must be at least 1")?;
    Ok(Decoder::ShardFor { shards })
}

/// A decimal 64-bit number: ASCII digits only.
fn decimal(text: &str, what: &str) -> Result<u64> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| anyhow!("{text:?} is not a decimal 64-bit {what}"))
}

/// A preset layout by name, or `uuid7`/`ulid`, with the epoch overridden when given.
pub fn preset_decoder(name: &str, epoch: Option<u64>) -> Result<Decoder> {
    match (name, epoch) {
        ("uuid7" | "ulid" | "composite", Some(_)) => {
            bail!("--epoch applies to snowflake layouts, not {name}")
        }
        ("uuid7", None) => Ok(Decoder::Uuid7),
        ("ulid", None) => Ok(Decoder::Ulid),
        ("composite", None) => Ok(Decoder::Composite),
        _ => {
            let preset =
                Layout::preset(name).map_err(|e| anyhow!("{e} (or uuid7, ulid, composite)"))?;
            let layout = match epoch {
                Some(epoch_unix_ms) => Layout::new(LayoutSpec {
                    epoch_unix_ms,
                    ..*preset.spec()
                })
                .context("--epoch")?,
                None => preset,
            };
            Ok(Decoder::Snowflake {
                name: name.to_owned(),
                layout,
            })
        }
    }
}

impl Decoder {
    fn decode(&self, id: &str) -> Result<Record> {
        match self {
            Decoder::Snowflake { name, layout } => {
                let n: u64 = id
                    .parse()
                    .with_context(|| format!("{id:?} is not a decimal 64-bit id"))?;
                let d = layout.decode(n)?;
                let mut fields = vec![
                    ("id", json!(n.to_string())),
                    ("timestamp", json!(d.rfc3339())),
                    ("unix_ms", json!(d.unix_millis())),
                ];
                let node = d.parts.node;
                match name.as_str() {
                    // Discord's 10-bit node field is a 5-bit worker above a 5-bit process.
                    "discord" => {
                        fields.push(("worker", json!(node >> 5)));
                        fields.push(("process", json!(node & 0x1f)));
                    }
                    "instagram" => fields.push(("shard", json!(node))),
                    "sonyflake" => fields.push(("machine", json!(node))),
                    "twitter" | "snowflake" | "js53" => fields.push(("worker", json!(node))),
                    _ => fields.push(("node", json!(node))),
                }
                fields.push(("sequence", json!(d.parts.sequence)));
                let context = vec![("kind", json!("snowflake")), ("layout", json!(name))];
                Ok(Record::offline(context, fields))
            }
            Decoder::Uuid7 => {
                let u: Uuid7 = id
                    .parse()
                    .with_context(|| format!("{id:?} is not a UUIDv7"))?;
                Ok(time_record("uuid7", u.to_string(), u.unix_millis()))
            }
            Decoder::Ulid => {
                let u: Ulid = id
                    .parse()
                    .with_context(|| format!("{id:?} is not a ULID"))?;
                Ok(time_record("ulid", u.to_string(), u.unix_millis()))
            }
            Decoder::Composite => {
                let key: CompositeKey = id.parse()?;
                Ok(Record::offline(
                    vec![("kind", json!("composite"))],
                    vec![
                        ("id", json!(key.to_string())),
                        ("shard", json!(key.shard)),
                        ("local", json!(key.local.to_string())),
                    ],
                ))
            }
            Decoder::Residue { step, offsets } => {
                let n = decimal(id, "id")?;
                let mut fields = vec![
                    ("id", json!(n.to_string())),
                    ("step", json!(step.get())),
                    ("residue", json!(keys::residue_of(n, *step))),
                ];
                if let Some(offsets) = offsets {
                    fields.push(("member", json!(keys::member_of(n, *step, offsets))));
                }
                Ok(Record::offline(vec![("kind", json!("residue"))], fields))
            }
            Decoder::ShardFor { shards } => {
                let key = decimal(id, "key")?;
                Ok(Record::offline(
                    vec![("kind", json!("shard_for"))],
                    vec![
                        ("key", json!(key.to_string())),
                        ("shards", json!(shards.get())),
                        ("shard", json!(keys::shard_for(key, *shards))),
                    ],
                ))
            }
            Decoder::Node { client, namespace } => {
                let decoded: idmint_api::Decoded =
                    client.get(&["v1", "decode", namespace, id], &[])?;
                Ok(node_record(decoded))
            }
        }
    }
}

fn time_record(kind: &str, id: String, unix_ms: u64) -> Record {
    Record::offline(
        vec![("kind", json!(kind))],
        vec![
            ("id", json!(id)),
            // After 9999-12-31 RFC 3339 has no form: JSON null, text says so, unix_ms stays.
            (
                "timestamp",
                json!(idmint_core::layout::rfc3339_millis(unix_ms)),
            ),
            ("unix_ms", json!(unix_ms)),
        ],
    )
}

/// A node's answer as a record; its JSON is the answer itself.
fn node_record(decoded: idmint_api::Decoded) -> Record {
    use idmint_api::Decoded as D;
    let json = serde_json::to_value(&decoded).unwrap_or(Value::Null);
    let (kind, namespace, fields) = match decoded {
        D::Sequence {
            namespace,
            id,
            in_namespace,
            issued,
            step,
            residue,
            member,
        } => {
            let mut fields = vec![
                ("id", json!(id.to_string())),
                ("in_namespace", json!(in_namespace)),
                ("issued", json!(issued)),
            ];
            // Fields a node older than this CLI does not send are left out.
            fields.extend(step.map(|s| ("step", json!(s))));
            fields.extend(residue.map(|r| ("residue", json!(r))));
            fields.extend(member.map(|m| ("member", json!(m))));
            ("sequence", namespace, fields)
        }
        D::Snowflake {
            namespace,
            id,
            timestamp,
            unix_ms,
            worker,
            shard,
            sequence,
        } => (
            "snowflake",
            namespace,
            vec![
                ("id", json!(id.to_string())),
                ("timestamp", json!(timestamp)),
                ("unix_ms", json!(unix_ms)),
                // The node names the field by the namespace's layout: `shard` for instagram.
                match shard {
                    Some(shard) => ("shard", json!(shard)),
                    None => ("worker", json!(worker)),
                },
                ("sequence", json!(sequence)),
            ],
        ),
        D::Uuid7 {
            namespace,
            id,
            timestamp,
            unix_ms,
        }
        | D::Ulid {
            namespace,
            id,
            timestamp,
            unix_ms,
        } => (
            json.get("kind").and_then(Value::as_str).unwrap_or("time"),
            namespace,
            vec![
                ("id", json!(id)),
                ("timestamp", json!(timestamp)),
                ("unix_ms", json!(unix_ms)),
            ],
        ),
        // A kind newer than this CLI: show the answer as it came.
        _ => ("unknown", String::new(), vec![("answer", json.clone())]),
    };
    let kind = kind.to_owned();
    Record {
        context: vec![("kind", json!(kind)), ("namespace", json!(namespace))],
        fields,
        json,
    }
}

fn print(out: &mut Out, record: &Record, format: Format) -> Result<()> {
    let text = |label: &str, v: &Value| match v {
        Value::String(s) => s.clone(),
        // A time past what RFC 3339 can write is null (see `time_record`).
        Value::Null if label == "timestamp" => {
            "after 9999-12-31T23:59:59.999Z (beyond RFC 3339; see unix_ms)".to_owned()
        }
        // A residue class no member owns.
        Value::Null => "none".to_owned(),
        other => other.to_string(),
    };
    match format {
        Format::Block => {
            let labels = || record.context.iter().chain(&record.fields);
            let width = labels().map(|(label, _)| label.len()).max().unwrap_or(0) + 1;
            for (label, value) in labels() {
                out.line(format_args!("{label:<width$}{}", text(label, value)))?;
            }
        }
        Format::Row => {
            let row: Vec<String> = record.fields.iter().map(|(l, v)| text(l, v)).collect();
            out.line(format_args!("{}", row.join("\t")))?;
        }
        Format::Json => out.line(format_args!("{}", record.json))?,
    }
    Ok(())
}

/// Decodes `id`, or every id on standard input when it is `None`, and prints the results.
pub fn run(out: &mut Out, decoder: &Decoder, id: Option<&str>, json: bool) -> Result<()> {
    if let Some(id) = id {
        let format = if json { Format::Json } else { Format::Block };
        return print(out, &decoder.decode(id.trim())?, format);
    }
    let format = if json { Format::Json } else { Format::Row };
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("give an ID, or ids on standard input, one per line (e.g. `idmint next ... | idmint decode ...`)");
    }
    for (number, line) in stdin.lock().lines().enumerate() {
        let line = line.context("reading ids from standard input")?;
        let id = line.trim();
        if id.is_empty() {
            continue;
        }
        let record = decoder
            .decode(id)
            .with_context(|| format!("standard input, line {}", number + 1))?;
        print(out, &record, format)?;
    }
    Ok(())
}
