//! `idmint audit verify` and `idmint audit export`: read the authority's audit ledger
//! ([`idmint_store::audit`]) with the node's own configuration, offline.
//!
//! `verify` proves, from what the store recorded, that no two grants share an id (give-backs
//! accounted for) and that every watermark is above every grant; with a multi authority, each
//! member separately (members own disjoint residue classes). It exits 1 on a violation, naming
//! each one, and when any ledger (the authority, or any member) cannot be read, naming it: it
//! never passes on the part it could read. `export` writes every entry as CSV or JSON lines.
//!
//! Invariants: both only read (`subjects`, `entries`, `list`); nothing is created, reserved or
//! pruned. Like `admin reseed`, they open the authority the configuration names: a file
//! authority is locked by a running node (one process per data directory), so stop it first;
//! the networked authorities can be read while nodes serve.

use anyhow::{bail, Context, Result};
use idmint_store::audit::{self, AuditEntry, AuditReport};
use idmint_store::Authority;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the ledger is: the node's configuration and data directory.
#[derive(Debug, Clone)]
pub struct Source {
    /// The configuration file.
    pub config: Option<PathBuf>,
    /// The data directory (the file authority).
    pub data_dir: Option<PathBuf>,
}

/// The export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A header line, then one line per entry.
    Csv,
    /// One JSON object per line.
    Json,
}

/// A ledger to read: its label for messages, and its authority or why it cannot be read.
type Ledger = (String, std::result::Result<Arc<dyn Authority>, String>);

/// The authorities whose ledgers to read: the configured one, or every member of a multi
/// authority (one that never connected with the reason), each with a label for messages.
async fn ledgers(source: &Source) -> Result<Vec<Ledger>> {
    let file = crate::serve::load_config(source.config.as_deref())?;
    let data_dir = crate::serve::resolve_data_dir(source.data_dir.clone(), &file)?;
    if !file.authority.is_durable() {
        bail!("the memory authority keeps nothing: there is no ledger to read");
    }
    let authority = idmint_store::connect(&file.authority, &data_dir)
        .await
        .with_context(|| format!("opening the {} authority", file.authority))?;
    let out: Vec<Ledger> = match authority.members().map(|m| m.audited()) {
        Some(members) => members
            .into_iter()
            .map(|m| (format!("member {} ({})", m.number, m.kind), m.ledger))
            .collect(),
        None => vec![(format!("the {} authority", authority.kind()), Ok(authority))],
    };
    for (label, a) in &out {
        let Ok(a) = a else { continue };
        if a.audit_log().is_none() {
            if a.kind() == "upstream" {
                bail!(
                    "{label} keeps no audit ledger: the tier above records what it granted; \
                     verify with that node's configuration"
                );
            }
            bail!("{label} keeps no audit ledger");
        }
    }
    Ok(out)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// What `verify` found in one ledger: its report, or why it could not be read.
pub type Verified = (String, std::result::Result<AuditReport, String>);

/// Runs `verify`: per ledger, the report (counts and violations) or why it could not be read.
/// A ledger that cannot be read does not stop the others from being read.
pub fn verify(source: &Source) -> Result<Vec<Verified>> {
    runtime()?.block_on(async {
        let mut reports = Vec::new();
        for (label, a) in ledgers(source).await? {
            let report = match a {
                Ok(a) => read_report(&*a).await,
                Err(e) => Err(format!("not connected: {e}")),
            };
            reports.push((label, report));
        }
        Ok(reports)
    })
}

async fn read_report(a: &dyn Authority) -> std::result::Result<AuditReport, String> {
    let states = a
        .list()
        .await
        .map_err(|e| format!("reading the namespaces: {e}"))?;
    let log = a.audit_log().ok_or("it keeps no audit ledger")?;
    audit::verify(log, &states)
        .await
        .map_err(|e| format!("reading the audit ledger: {e}"))
}

/// Prints `verify`'s reports; returns whether every ledger was read and is clean.
pub fn print_report(out: &mut impl Write, reports: &[Verified]) -> Result<bool> {
    let mut clean = true;
    for (label, r) in reports {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                clean = false;
                writeln!(out, "UNREADABLE {label}: {e}")?;
                continue;
            }
        };
        writeln!(
            out,
            "{label}: {} entries of {} namespaces and lease groups: {} grants, {} give-backs \
             ({} whose grant was pruned), {} worker leases, {} checkpoints; {} watermarks \
             checked",
            r.entries,
            r.subjects,
            r.grants,
            r.give_backs,
            r.unmatched_give_backs,
            r.leases,
            r.checkpoints,
            r.watermarks_checked
        )?;
        for v in &r.violations {
            clean = false;
            writeln!(out, "VIOLATION {label}: {v}")?;
        }
    }
    if clean {
        writeln!(
            out,
            "ok: no id was granted twice, and every watermark is above every grant"
        )?;
    }
    Ok(clean)
}

/// Runs `export`: every entry (of `namespace` only, if given) to `out`.
pub fn export(
    source: &Source,
    format: Format,
    namespace: Option<&str>,
    out: &mut impl Write,
) -> Result<u64> {
    let only = namespace
        .map(idmint_core::NamespaceName::new)
        .transpose()
        .context("--namespace")?;
    runtime()?.block_on(async {
        if format == Format::Csv {
            writeln!(out, "authority,subject,seq,at_unix_ms,event,a,b,holder")?;
        }
        let mut written = 0;
        for (label, a) in ledgers(source).await? {
            let a = a.map_err(|e| anyhow::anyhow!("{label} cannot be read: {e}"))?;
            let log = a.audit_log().context("no ledger")?;
            let subjects = match &only {
                Some(name) => vec![name.clone()],
                None => log.subjects().await?,
            };
            for subject in subjects {
                let mut after = None;
                loop {
                    let page = log.entries(&subject, after, audit::PAGE).await?;
                    for entry in &page {
                        write_entry(out, format, &label, entry)?;
                        written += 1;
                    }
                    after = page.last().map(|e| e.seq).or(after);
                    if page.len() < audit::PAGE {
                        break;
                    }
                }
            }
        }
        Ok(written)
    })
}

fn write_entry(
    out: &mut impl Write,
    format: Format,
    label: &str,
    e: &AuditEntry,
) -> std::io::Result<()> {
    let (a, b) = e.event.numbers();
    match format {
        Format::Csv => writeln!(
            out,
            "{},{},{},{},{},{a},{b},{}",
            csv_field(label),
            e.subject,
            e.seq,
            e.at_unix_ms,
            e.event.name(),
            csv_field(&e.holder)
        ),
        Format::Json => {
            let (first, second) = match e.event {
                idmint_store::AuditEvent::Leased { .. } => ("worker", "token"),
                idmint_store::AuditEvent::Granted { .. }
                | idmint_store::AuditEvent::GivenBack { .. } => ("start", "end"),
                idmint_store::AuditEvent::Checkpoint { .. } => ("below", "token"),
                _ => ("from", "to"),
            };
            let mut object = serde_json::Map::new();
            object.insert("authority".into(), label.into());
            object.insert("subject".into(), e.subject.as_str().into());
            object.insert("seq".into(), e.seq.into());
            object.insert("at_unix_ms".into(), e.at_unix_ms.into());
            object.insert("event".into(), e.event.name().into());
            // Ids and watermarks as decimal strings, as everywhere in idmint's JSON.
            object.insert(first.into(), a.to_string().into());
            object.insert(second.into(), b.to_string().into());
            object.insert("holder".into(), e.holder.as_str().into());
            writeln!(out, "{}", serde_json::Value::Object(object))
        }
    }
}

/// A CSV field, quoted when it holds a comma, a quote or a line break (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("web-1 pid 7"), "web-1 pid 7");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
