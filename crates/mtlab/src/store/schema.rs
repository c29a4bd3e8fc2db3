//! The store's schema and its migrations.
//!
//! The schema version lives in `PRAGMA user_version` (0 in a fresh file).
//! To change the schema: add `SCHEMA_V2`-style SQL, add a `1 => ...` arm to
//! [`migrate`] that turns a version-1 file into version 2, bump
//! [`SCHEMA_VERSION`], and add a test that opens a version-1 file. Old files
//! are then upgraded in place the first time a newer mtlab opens them, inside
//! one transaction, so a crash mid-migration leaves the old version intact.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{sql_err, StoreError};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i32 = 1;

/// Version 1. Nested parts of a run are JSON text (queryable with SQLite's
/// `json_extract`/`json_each`); the parts that are listed and compared —
/// configurations and measurements — have their own rows.
///
/// `AUTOINCREMENT` so the id of a deleted run is never handed out again:
/// users quote ids in notes and scripts (`mtlab runs show 12`).
///
/// `measurements."values"` is quoted because VALUES is an SQL keyword; it
/// holds a JSON array of numbers, with non-finite values as the strings
/// `"NaN"`, `"Infinity"`, `"-Infinity"` (JSON has no literal for them).
const SCHEMA_V1: &str = r#"
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    study         TEXT NOT NULL,
    title         TEXT NOT NULL,
    started       TEXT NOT NULL,   -- RFC 3339, UTC: sorts as text
    duration_s    REAL NOT NULL,
    mtlab_version TEXT NOT NULL,
    command_line  TEXT NOT NULL,   -- JSON array of strings
    environment   TEXT NOT NULL,   -- JSON object (study::Environment)
    settings      TEXT NOT NULL,   -- JSON object, name -> value
    details       TEXT NOT NULL,   -- JSON, 'null' when none
    notes         TEXT NOT NULL    -- JSON array of strings
);
CREATE INDEX runs_study_started ON runs (study, started);
CREATE INDEX runs_started ON runs (started);

CREATE TABLE configurations (
    run_id   INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name     TEXT NOT NULL,
    params   TEXT NOT NULL,        -- JSON object, name -> value
    baseline TEXT,                 -- a configuration name, or NULL
    PRIMARY KEY (run_id, position)
);

CREATE TABLE measurements (
    run_id          INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position        INTEGER NOT NULL,
    configuration   TEXT NOT NULL,
    metric          TEXT NOT NULL,
    unit            TEXT NOT NULL,
    lower_is_better INTEGER NOT NULL,
    "values"        TEXT NOT NULL, -- JSON array, one value per repetition
    PRIMARY KEY (run_id, position)
);
"#;

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<i32> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

/// Refuses a file written by a newer mtlab before anything touches it.
pub(super) fn refuse_newer(path: &Path, found: i32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    Ok(())
}

/// Brings the file to [`SCHEMA_VERSION`]: creates the schema in a fresh
/// file, upgrades an older one step by step, refuses a newer one or an
/// SQLite file that is not an mtlab store.
///
/// Runs in an IMMEDIATE transaction, so two mtlab processes opening a fresh
/// file at once do not both create the tables: the second waits (busy
/// timeout), then finds the version already current.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    if user_version(conn).map_err(sql_err(path, "reading the schema version"))? == SCHEMA_VERSION {
        return Ok(()); // the common case; takes no write lock
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_err(path, "locking the store to set up its schema"))?;
    let found = user_version(&tx).map_err(sql_err(path, "reading the schema version"))?;
    refuse_newer(path, found)?;
    if found == 0 {
        // Version 0 is SQLite's default: either an empty file or someone
        // else's database. Never add our tables to someone else's database.
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .map_err(sql_err(path, "reading the list of tables"))?;
        if tables > 0 {
            return Err(StoreError::NotAStore { path: path.to_path_buf() });
        }
    }
    let mut version = found;
    while version < SCHEMA_VERSION {
        version = match version {
            0 => {
                tx.execute_batch(SCHEMA_V1).map_err(sql_err(path, "creating the schema"))?;
                1
            }
            // 1 => { tx.execute_batch(MIGRATE_V1_TO_V2)...; 2 }
            _ => return Err(StoreError::NotAStore { path: path.to_path_buf() }),
        };
    }
    // A pragma takes no bound parameters; `version` is an integer we chose.
    tx.execute_batch(&format!("PRAGMA user_version = {version}"))
        .map_err(sql_err(path, "recording the schema version"))?;
    tx.commit().map_err(sql_err(path, "committing the schema"))
}
