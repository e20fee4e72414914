//! The store's own facts for both MySQL authorities: the InnoDB table `<table>_meta`
//! (`MetaTable`), created at connect when absent, holding the store's incarnation
//! ([`crate::incarnation`]) in the row `k = 'incarnation'`.
//!
//! Invariants: the incarnation is written once (`INSERT IGNORE` on the primary key: the first
//! commit wins, later ones change nothing) and read back from the table, never assumed.

use super::conn::{Client, Session};
use super::sql::{quote_identifier, side_table_name, text_literal};
use super::{col, execute, query};
use crate::{Incarnation, StoreError};
use mysql_async::Conn;

/// `<table>_meta`, or, when that is not a plain identifier of at most 64 characters, `<the
/// table's first 40 characters, sanitised>_<16 hex digits of a stable hash>_meta`.
#[derive(Debug, Clone)]
pub(super) struct MetaTable {
    /// Unquoted (for `information_schema`).
    name: String,
    /// Quoted.
    quoted: String,
}

impl MetaTable {
    pub(super) fn for_table(table: &str) -> Self {
        let name = side_table_name(table, "meta");
        MetaTable {
            quoted: quote_identifier(&name),
            name,
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` of the table.
    pub(super) fn ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n  \
             k VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,\n  \
             v TEXT CHARACTER SET utf8mb4 NOT NULL\n\
             ) ENGINE=InnoDB COMMENT='idmint store facts v1: the incarnation, written once'",
            self.quoted
        )
    }
}

/// Creates the table if absent.
pub(super) async fn ensure_table(conn: &mut Conn, t: &MetaTable) -> Result<(), StoreError> {
    super::ensure_table(conn, &t.name, &t.ddl()).await
}

async fn read(conn: &mut Conn, t: &MetaTable) -> Result<Option<Incarnation>, StoreError> {
    let rows = query(
        conn,
        &format!("SELECT v FROM {} WHERE k = 'incarnation'", t.quoted),
    )
    .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let text: String = col(row, 0, "the store's incarnation")?;
    Incarnation::parse(&text)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            message: format!("the store's incarnation: {e}"),
        })
}

/// The store's incarnation (reads only).
pub(super) async fn incarnation(
    client: &Client,
    t: &MetaTable,
) -> Result<Option<Incarnation>, StoreError> {
    client
        .read_on_conn("incarnation", async |s: &mut Session| {
            read(&mut s.conn, t).await
        })
        .await
}

/// Writes `candidate` unless the store has an incarnation, then reads what it has.
pub(super) async fn create_incarnation(
    client: &Client,
    t: &MetaTable,
    candidate: &Incarnation,
) -> Result<Incarnation, StoreError> {
    let insert = format!(
        "INSERT IGNORE INTO {} (k, v) VALUES ('incarnation', {})",
        t.quoted,
        text_literal(candidate.as_str())
    );
    client
        .on_conn("create_incarnation", async |s: &mut Session| {
            execute(&mut s.conn, &insert).await?;
            read(&mut s.conn, t)
                .await?
                .ok_or_else(|| StoreError::Corrupt {
                    message: "the store's incarnation is missing right after it was written".into(),
                })
        })
        .await
}
