//! The `decode_offline` kind: each case of `decode.json` decoded with idmint-core's layouts (the
//! Rust client has no offline decoder of its own; `idmint decode` uses these same layouts), its
//! fields named as the suite names them, compared with what `idmint decode --json` answered.
//! The routing cases (composite keys, `step`, `shards`) go through `idmint_client::keys`.
//!
//! Invariants: every key of a case's `expect` is compared (a key this decoder does not make is
//! a failure, not a skip); a case with `"error": true` must fail to decode.

use idmint_client::keys;
use idmint_core::{FieldOrder, Layout, LayoutSpec, Ulid, Uuid7};
use serde_json::{json, Map, Value};
use std::num::NonZeroU64;
use std::time::Duration;

/// A time unit of the suite: a whole number with `us`, `ms` or `s` (`1ms`, `10ms`, `1s`).
fn unit(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("unit {text:?}: no number"))?;
    match suffix {
        "us" => Ok(Duration::from_micros(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        other => Err(format!("unit {text:?}: unknown suffix {other:?}")),
    }
}

/// The snowflake layout of a case: a preset (its epoch replaced when `epoch` is given) or custom
/// `bits`; its name in the decoder's answer.
fn layout(case: &Value) -> Result<(String, Layout), String> {
    let epoch = case.get("epoch").and_then(Value::as_u64);
    if let Some(bits) = case.get("bits") {
        let bits: Vec<u8> = bits
            .as_array()
            .ok_or("bits is not a list")?
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect::<Option<_>>()
            .ok_or("bits holds something other than bit counts")?;
        let [timestamp_bits, node_bits, sequence_bits] = bits[..] else {
            return Err(format!("bits {bits:?}: expected three"));
        };
        let time_unit = unit(case.get("unit").and_then(Value::as_str).ok_or("no unit")?)?;
        let layout = Layout::new(LayoutSpec {
            timestamp_bits,
            node_bits,
            sequence_bits,
            time_unit,
            epoch_unix_ms: epoch.ok_or("custom bits without epoch")?,
            order: FieldOrder::NodeThenSequence,
            max_bits: 63,
        })
        .map_err(|e| format!("custom layout: {e}"))?;
        return Ok(("custom".to_owned(), layout));
    }
    let name = case
        .get("layout")
        .and_then(Value::as_str)
        .ok_or("neither layout nor bits")?;
    let preset = Layout::preset(name).map_err(|e| format!("layout {name}: {e}"))?;
    let layout = match epoch {
        Some(epoch_unix_ms) => Layout::new(LayoutSpec {
            epoch_unix_ms,
            ..*preset.spec()
        })
        .map_err(|e| format!("layout {name} with epoch {epoch_unix_ms}: {e}"))?,
        None => preset,
    };
    Ok((name.to_owned(), layout))
}

/// The node field's names of a layout (Discord's 10-bit node is a worker above a process).
fn node_fields(layout: &str, node: u64) -> Vec<(&'static str, Value)> {
    match layout {
        "discord" => vec![
            ("worker", json!(node >> 5)),
            ("process", json!(node & 0x1f)),
        ],
        "instagram" => vec![("shard", json!(node))],
        "sonyflake" => vec![("machine", json!(node))],
        "twitter" | "snowflake" | "js53" => vec![("worker", json!(node))],
        _ => vec![("node", json!(node))],
    }
}

fn time_fields(kind: &str, id: String, unix_ms: u64) -> Map<String, Value> {
    let timestamp = idmint_core::layout::rfc3339_millis(unix_ms).map_or(Value::Null, Value::from);
    Map::from_iter([
        ("kind".to_owned(), json!(kind)),
        ("id".to_owned(), json!(id)),
        ("timestamp".to_owned(), timestamp),
        ("unix_ms".to_owned(), json!(unix_ms)),
    ])
}

/// A decimal 64-bit number of a case: ASCII digits only, as the CLI takes it.
fn decimal(text: &str) -> Result<u64, String> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| format!("{text:?} is not a decimal 64-bit number"))
}

fn positive(case: &Value, key: &str) -> Result<NonZeroU64, String> {
    case.get(key)
        .and_then(Value::as_u64)
        .and_then(NonZeroU64::new)
        .ok_or_else(|| format!("{key} is not a number from 1"))
}

/// The fields of a routing case (`shards`, `step`, or a composite key), made with the client's
/// `keys` helpers; `None` for a case of another kind.
fn route(case: &Value, text: Option<&str>) -> Option<Result<Map<String, Value>, String>> {
    let fields = |pairs: Vec<(&str, Value)>| {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Map<_, _>>()
    };
    if case.get("shards").is_some() {
        return Some((|| {
            let shards = positive(case, "shards")?;
            let key = decimal(case.get("key").and_then(Value::as_str).ok_or("no key")?)?;
            Ok(fields(vec![
                ("kind", json!("shard_for")),
                ("key", json!(key.to_string())),
                ("shards", json!(shards.get())),
                ("shard", json!(keys::shard_for(key, shards))),
            ]))
        })());
    }
    let text = text?;
    if case.get("step").is_some() {
        return Some((|| {
            let step = positive(case, "step")?;
            let id = decimal(text)?;
            let mut out = fields(vec![
                ("kind", json!("residue")),
                ("id", json!(id.to_string())),
                ("step", json!(step.get())),
                ("residue", json!(keys::residue_of(id, step))),
            ]);
            if let Some(offsets) = case.get("offsets").and_then(Value::as_array) {
                let offsets: Vec<u64> = offsets.iter().filter_map(Value::as_u64).collect();
                out.insert(
                    "member".to_owned(),
                    json!(keys::member_of(id, step, &offsets)),
                );
            }
            Ok(out)
        })());
    }
    if case.get("layout").and_then(Value::as_str) == Some("composite") {
        return Some(
            text.parse::<keys::CompositeKey>()
                .map_err(|e| e.to_string())
                .map(|k| {
                    fields(vec![
                        ("kind", json!("composite")),
                        ("id", json!(k.to_string())),
                        ("shard", json!(k.shard)),
                        ("local", json!(k.local.to_string())),
                    ])
                }),
        );
    }
    None
}

/// The decoder's fields of one case, or why it refused the id.
pub fn decode(case: &Value) -> Result<Map<String, Value>, String> {
    let text = case.get("id").and_then(Value::as_str);
    if let Some(routed) = route(case, text) {
        return routed;
    }
    let id = text.ok_or("the case has no id")?;
    match case.get("layout").and_then(Value::as_str) {
        Some("uuid7") => {
            let u: Uuid7 = id.parse().map_err(|e| format!("not a UUIDv7: {e}"))?;
            return Ok(time_fields("uuid7", u.to_string(), u.unix_millis()));
        }
        Some("ulid") => {
            let u: Ulid = id.parse().map_err(|e| format!("not a ULID: {e}"))?;
            return Ok(time_fields("ulid", u.to_string(), u.unix_millis()));
        }
        _ => {}
    }
    let (name, layout) = layout(case)?;
    let n: u64 = id
        .parse()
        .map_err(|e| format!("not a decimal 64-bit id: {e}"))?;
    let d = layout.decode(n).map_err(|e| e.to_string())?;
    let mut fields = time_fields("snowflake", n.to_string(), d.unix_millis());
    fields.insert("layout".to_owned(), json!(name));
    for (key, value) in node_fields(&name, d.parts.node) {
        fields.insert(key.to_owned(), value);
    }
    fields.insert("sequence".to_owned(), json!(d.parts.sequence));
    Ok(fields)
}

/// Runs every case of `file` (in clients/conformance); the failures, one line each.
pub fn run_file(file: &str) -> Result<(), String> {
    let path = super::suite::dir().join(file);
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
    let cases = data
        .get("cases")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| format!("{}: no cases", path.display()))?;
    let mut failures = Vec::new();
    for case in cases {
        let got = decode(case);
        if case.get("error").and_then(Value::as_bool) == Some(true) {
            if let Ok(fields) = got {
                failures.push(format!("{case}: decoded, must be refused: {fields:?}"));
            }
            continue;
        }
        let Some(expect) = case.get("expect").and_then(Value::as_object) else {
            failures.push(format!("{case}: neither expect nor error"));
            continue;
        };
        match got {
            Err(why) => failures.push(format!("{case}: refused: {why}")),
            Ok(fields) => {
                for (key, want) in expect {
                    if fields.get(key) != Some(want) {
                        failures.push(format!(
                            "{case}: {key} is {:?}, want {want}",
                            fields.get(key)
                        ));
                    }
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
