//! The SQL text of the MySQL authority: block mode's table and the worker-lease tables
//! ([`schema_sql`], `LeaseTables`), the ticket tables
//! of Flickr's ticket mode ([`ticket_table_name`], [`ticket_table_sql`]) with their
//! self-describing comments, and [`ticket_sql`], the setup of N ticket servers that
//! `idmint sql mysql` prints.
//!
//! Invariants: identifiers are backtick-quoted, and only plain identifiers (letters, digits,
//! `_`, `$`, at most 64 characters) are used as table names; ticket table names are distinct
//! for distinct namespaces and stable across versions and platforms (FNV-1a, not
//! `DefaultHasher`).
//!
//! What it does not do: run anything (see `blocks` and `tickets`).

use idmint_core::{NamespaceName, SequenceSpec, Width};
use std::collections::HashMap;

/// The prefix of ticket-mode tables.
pub const TICKET_TABLE_PREFIX: &str = "idmint_tickets_";
/// MySQL identifiers are at most 64 characters.
const MAX_IDENTIFIER: usize = 64;
/// The first words of a ticket table's comment.
const TICKET_COMMENT_TAG: &str = "idmint-ticket v1";

/// Whether `s` is a plain identifier we may put between backticks without escaping.
pub(super) fn valid_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENTIFIER
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
}

/// `` `name` ``, with backticks doubled.
pub(super) fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `CREATE TABLE IF NOT EXISTS` of block mode's table `table` and of its worker-lease tables
/// `<table>_lease_groups` and `<table>_leases` (left out, with a comment saying why, when those
/// names would pass 64 characters), each statement ended by `;` (for `idmint sql mysql`).
pub fn schema_sql(table: &str) -> String {
    let mut out = format!("{};\n", namespace_table_sql(table));
    out.push_str(&AuditTable::for_table(table).ddl());
    out.push_str(";\n");
    out.push_str(&super::meta::MetaTable::for_table(table).ddl());
    out.push_str(";\n");
    match LeaseTables::for_table(table) {
        Ok(tables) => {
            for ddl in tables.ddl() {
                out.push_str(&ddl);
                out.push_str(";\n");
            }
        }
        Err(e) => out.push_str(&format!("-- no worker-lease tables: {e}\n")),
    }
    out
}

/// The worker-lease tables of one namespace table (block mode's, or the `table` setting in
/// ticket mode).
#[derive(Debug, Clone)]
pub(super) struct LeaseTables {
    /// `<table>_lease_groups`, unquoted (for `information_schema`).
    pub(super) groups_name: String,
    /// `<table>_leases`, unquoted.
    pub(super) leases_name: String,
    /// The same, quoted.
    pub(super) groups: String,
    pub(super) leases: String,
}

impl LeaseTables {
    /// The lease tables of `table`; an error when it is not a plain identifier or leaves no
    /// room for the suffixes within 64 characters.
    pub(super) fn for_table(table: &str) -> Result<Self, String> {
        let groups_name = format!("{table}_lease_groups");
        let leases_name = format!("{table}_leases");
        if !valid_identifier(table) || !valid_identifier(&groups_name) {
            return Err(format!(
                "worker leases need a table name of letters, digits, _ and $ of at most {} \
                 characters (for {table}_lease_groups), got {table:?}",
                MAX_IDENTIFIER - "_lease_groups".len()
            ));
        }
        Ok(LeaseTables {
            groups: quote_identifier(&groups_name),
            leases: quote_identifier(&leases_name),
            groups_name,
            leases_name,
        })
    }

    /// `CREATE TABLE IF NOT EXISTS` of the groups table, then of the leases table.
    /// `expires_at` is UTC by the server's clock (`UTC_TIMESTAMP(6)`), whatever the session's
    /// time zone; `NULL` once released.
    pub(super) fn ddl(&self) -> [String; 2] {
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {} (\n  \
                 grp VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,\n  \
                 layout TEXT CHARACTER SET utf8mb4 NOT NULL,\n  \
                 last_token BIGINT UNSIGNED NOT NULL\n\
                 ) ENGINE=InnoDB COMMENT='idmint worker lease groups v1'",
                self.groups
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (\n  \
                 grp VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 worker BIGINT UNSIGNED NOT NULL,\n  \
                 token BIGINT UNSIGNED NOT NULL,\n  \
                 holder TEXT CHARACTER SET utf8mb4 NOT NULL,\n  \
                 floor_unix_ms BIGINT UNSIGNED NOT NULL,\n  \
                 expires_at DATETIME(6) NULL,\n  \
                 PRIMARY KEY (grp, worker)\n\
                 ) ENGINE=InnoDB COMMENT='idmint worker leases v1: expires_at is UTC by the \
                 server clock, NULL once released'",
                self.leases
            ),
        ]
    }
}

/// The audit ledger of one namespace table (block mode's, or the `table` setting in ticket
/// mode, like the lease tables): `<table>_audit`, or, when that is not a plain identifier of
/// at most 64 characters, `<the table's first 40 characters, sanitised>_<16 hex digits of a
/// stable hash of the name>_audit`. Every authority has one: every grant writes to it.
#[derive(Debug, Clone)]
pub(super) struct AuditTable {
    /// Unquoted (for `information_schema`).
    pub(super) name: String,
    /// Quoted.
    pub(super) quoted: String,
}

/// `<table>_<suffix>`, or, when that is not a plain identifier of at most 64 characters,
/// `<the table's first 40 characters, sanitised>_<16 hex digits of a stable hash of the
/// name>_<suffix>`: the tables named after a namespace table (its ledger, its facts).
pub(super) fn side_table_name(table: &str, suffix: &str) -> String {
    let plain = format!("{table}_{suffix}");
    if valid_identifier(&plain) {
        return plain;
    }
    let sanitised: String = table
        .chars()
        .take(40)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{sanitised}_{:016x}_{suffix}", fnv1a64(table.as_bytes()))
}

impl AuditTable {
    pub(super) fn for_table(table: &str) -> Self {
        let name = side_table_name(table, "audit");
        AuditTable {
            quoted: quote_identifier(&name),
            name,
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` of the ledger. `seq` is drawn when an entry is inserted,
    /// which every write does after it locked the row it changes (the namespace's row, the
    /// ticket row, the lease group's row), so within one subject `seq` follows the order of the
    /// writes. `at_unix_ms` is the server's clock (UTC). The event's name is not constrained:
    /// readers check it (an unknown one is `Corrupt`).
    pub(super) fn ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n  \
             seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  \
             subject VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
             at_unix_ms BIGINT UNSIGNED NOT NULL,\n  \
             event VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
             a BIGINT UNSIGNED NOT NULL,\n  \
             b BIGINT UNSIGNED NOT NULL,\n  \
             holder TEXT CHARACTER SET utf8mb4 NOT NULL,\n  \
             KEY by_subject (subject, seq),\n  \
             KEY by_time (at_unix_ms)\n\
             ) ENGINE=InnoDB COMMENT='idmint audit ledger v1: append-only, at_unix_ms by the \
             server clock'",
            self.quoted
        )
    }
}

/// The server's clock as ms since the Unix epoch, whatever the session's time zone.
pub(super) const NOW_MS: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/// `s` as an SQL string expression that needs no escaping whatever the `sql_mode` (a hex
/// literal converted to utf8mb4).
pub(super) fn text_literal(s: &str) -> String {
    let mut hex = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        hex.push_str(&format!("{b:02x}"));
    }
    format!("CONVERT(X'{hex}' USING utf8mb4)")
}

/// `CREATE TABLE IF NOT EXISTS` of block mode's namespace table alone.
pub(super) fn namespace_table_sql(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n  \
         name VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,\n  \
         width TINYINT UNSIGNED NOT NULL,\n  \
         first BIGINT UNSIGNED NOT NULL,\n  \
         step BIGINT UNSIGNED NOT NULL,\n  \
         `offset` BIGINT UNSIGNED NOT NULL,\n  \
         hi BIGINT UNSIGNED NOT NULL,\n  \
         {RETIRED_COLUMN},\n  \
         {PARKS_COLUMN}\n\
         ) ENGINE=InnoDB COMMENT='idmint namespaces v1: hi is the watermark'",
        quote_identifier(table)
    )
}

/// The namespace table's retired mark (`1`: retired, set by the `UPDATE` that moves `hi` past
/// the largest id); added in place to a table made without it.
pub(super) const RETIRED_COLUMN: &str = "retired TINYINT UNSIGNED NOT NULL DEFAULT 0";

/// The namespace table's parked blocks ([`crate::parks`]): [`crate::Parks::encode`]'s text,
/// `NULL` or empty for none; added in place to a table made without it.
pub(super) const PARKS_COLUMN: &str = "parks TEXT CHARACTER SET ascii NULL";

/// The ticket table of `namespace`: `idmint_tickets_<name>` when the name is a lower-case
/// identifier (`[a-z0-9_]`) of at most 49 characters, otherwise
/// `idmint_tickets_<sanitised, at most 32>_<16 hex digits of a stable hash of the name>`
/// (so `Photos`, `photos.x` and `photos_x` get different tables). At most 64 characters.
pub fn ticket_table_name(namespace: &NamespaceName) -> String {
    let name = namespace.as_str();
    let room = MAX_IDENTIFIER - TICKET_TABLE_PREFIX.len();
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain && name.len() <= room {
        return format!("{TICKET_TABLE_PREFIX}{name}");
    }
    let sanitised: String = name
        .chars()
        .take(32)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{TICKET_TABLE_PREFIX}{sanitised}_{:016x}",
        fnv1a64(name.as_bytes())
    )
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms, unlike `DefaultHasher`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The comment of a ticket table: what namespace and spec it holds.
pub(super) fn ticket_comment(namespace: &NamespaceName, spec: &SequenceSpec) -> String {
    format!(
        "{TICKET_COMMENT_TAG} name={namespace} width={} first={} step={} offset={}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset()
    )
}

/// Parses [`ticket_comment`]'s output.
pub(super) fn parse_ticket_comment(comment: &str) -> Option<(NamespaceName, SequenceSpec)> {
    let rest = comment.strip_prefix(TICKET_COMMENT_TAG)?;
    let mut fields = HashMap::new();
    for part in rest.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        fields.insert(k, v);
    }
    let name = NamespaceName::new(fields.get("name")?).ok()?;
    let num = |k: &str| fields.get(k)?.parse::<u64>().ok();
    let width = Width::from_bits(u32::try_from(num("width")?).ok()?)?;
    let spec = SequenceSpec::new(width, num("first")?, num("step")?, num("offset")?).ok()?;
    Some((name, spec))
}

/// `CREATE TABLE IF NOT EXISTS` of `namespace`'s ticket table with `spec` (the spec of the
/// server the statement is run on: its step is the server's `auto-increment-increment`).
pub fn ticket_table_sql(namespace: &NamespaceName, spec: &SequenceSpec) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n  \
         id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  \
         stub CHAR(1) NOT NULL DEFAULT '' UNIQUE\n\
         ) ENGINE=InnoDB AUTO_INCREMENT={} COMMENT='{}'",
        quote_identifier(&ticket_table_name(namespace)),
        spec.first().max(1),
        ticket_comment(namespace, spec)
    )
}

/// The SQL and server configuration of Flickr's ticket servers for `namespace`, with `servers`
/// servers (at least 1): for each server its `my.cnf` lines (`auto-increment-increment = N`,
/// `auto-increment-offset = i`) and its table (64-bit ids from 1), and how to take an id.
/// For `idmint sql mysql`.
pub fn ticket_sql(namespace: &NamespaceName, servers: u32) -> String {
    let n = servers.max(1);
    let table = quote_identifier(&ticket_table_name(namespace));
    let mut out = format!(
        "-- idmint: Flickr ticket servers for namespace {namespace}, {n} server(s).\n\
         -- Server i issues the ids congruent to i mod {n}, so the servers never collide;\n\
         -- clients take ids from them round-robin and skip one that is down.\n\
         -- Take one id (one round trip):\n\
         --   REPLACE INTO {table} (stub) VALUES ('a');  -- then LAST_INSERT_ID()\n"
    );
    for i in 1..=n {
        let offset = u64::from(i % n);
        let spec = SequenceSpec::new(Width::Bits64, 1, u64::from(n), offset);
        out.push_str(&format!(
            "\n-- Server {i} of {n}. In its my.cnf:\n\
             --   [mysqld]\n\
             --   auto-increment-increment = {n}\n\
             --   auto-increment-offset = {i}\n\
             -- and on it:\n"
        ));
        match spec {
            Ok(spec) => {
                out.push_str(&ticket_table_sql(namespace, &spec));
                out.push_str(";\n");
            }
            // Every offset below n has ids between 1 and 2^63 - 1: not reached.
            Err(e) => out.push_str(&format!("-- (no table: {e})\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    #[test]
    fn schema_sql_holds_the_lease_tables_when_their_names_fit() {
        let sql = schema_sql("ids");
        assert_eq!(
            sql.matches("CREATE TABLE IF NOT EXISTS").count(),
            5,
            "{sql}"
        );
        assert!(sql.contains("`ids_lease_groups`") && sql.contains("`ids_leases`"));
        assert!(sql.contains("`ids_audit`") && sql.contains("`ids_meta`"));
        let long = "t".repeat(52);
        let sql = schema_sql(&long);
        assert_eq!(
            sql.matches("CREATE TABLE IF NOT EXISTS").count(),
            3,
            "{sql}"
        );
        assert!(sql.contains("-- no worker-lease tables"));
        assert!(LeaseTables::for_table(&"t".repeat(51)).is_ok());
    }

    #[test]
    fn every_table_has_a_ledger_name_that_fits() {
        assert_eq!(AuditTable::for_table("ids").name, "ids_audit");
        for table in ["t".repeat(60), "t".repeat(64), "odd-name".into()] {
            let audit = AuditTable::for_table(&table);
            assert!(valid_identifier(&audit.name), "{}", audit.name);
        }
        assert_ne!(
            AuditTable::for_table(&"t".repeat(60)).name,
            AuditTable::for_table(&"t".repeat(61)).name
        );
        assert_eq!(text_literal("a'b"), "CONVERT(X'612762' USING utf8mb4)");
    }

    #[test]
    fn ticket_tables_are_distinct_and_short() {
        assert_eq!(ticket_table_name(&name("photos")), "idmint_tickets_photos");
        let names = [
            "Photos",
            "photos.x",
            "photos_x",
            "photos-x",
            "a".repeat(128).as_str(),
        ]
        .map(|s| ticket_table_name(&name(s)));
        for (i, a) in names.iter().enumerate() {
            assert!(a.len() <= 64 && valid_identifier(a), "{a}");
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn ticket_comments_round_trip() {
        let spec = SequenceSpec::new(Width::Bits32, 7, 2, 1).unwrap();
        let n = name("users.names");
        assert_eq!(
            parse_ticket_comment(&ticket_comment(&n, &spec)),
            Some((n, spec))
        );
        assert_eq!(parse_ticket_comment("something else"), None);
        assert_eq!(
            parse_ticket_comment("idmint-ticket v1 name=x width=64 first=1 step=2 offset=2"),
            None
        );
    }

    #[test]
    fn ticket_sql_configures_every_server() {
        let sql = ticket_sql(&name("photos"), 2);
        for line in [
            "auto-increment-increment = 2",
            "auto-increment-offset = 1",
            "auto-increment-offset = 2",
            "step=2 offset=1",
            "step=2 offset=0",
            "REPLACE INTO `idmint_tickets_photos` (stub) VALUES ('a')",
        ] {
            assert!(sql.contains(line), "{line} missing from\n{sql}");
        }
    }
}
