//! The results store: every study run kept in one embedded SQLite file.
//!
//! Default location: `$MTLAB_STORE` if set, else
//! `$XDG_DATA_HOME/mtlab/runs.sqlite`, else `~/.local/share/mtlab/runs.sqlite`
//! (see [`Store::default_path`]); `--store PATH` picks another file.
//!
//! Several mtlab processes may write one store at once: the file is in WAL
//! mode (readers never block the writer), every insert is one IMMEDIATE
//! transaction (a run is stored whole or not at all, and writers queue for
//! the lock instead of failing), and a busy timeout makes a writer wait for
//! another's commit rather than report "database is locked".
//!
//! The schema is versioned with `PRAGMA user_version`; older files are
//! migrated on open, newer ones refused (see `schema.rs`).

mod schema;
mod values;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use crate::study::{Configuration, Measurement, Run};

pub use schema::SCHEMA_VERSION;
use values::{values_from_json, values_to_json};

/// How long a writer waits for another process's transaction before giving
/// up. Inserting a run takes milliseconds; a long wait means a stuck process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which runs [`Store::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs of this study (exact name); all studies when `None`.
    pub study: Option<String>,
    /// At most this many runs (the newest); all when `None`.
    pub limit: Option<usize>,
}

/// One line of `mtlab runs`: enough to pick a run without loading it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub id: i64,
    pub study: String,
    pub title: String,
    /// RFC 3339, UTC.
    pub started: String,
    pub duration_s: f64,
    /// Number of configurations in the run.
    pub configurations: usize,
    /// Number of measurements (configuration × metric) in the run.
    pub measurements: usize,
    /// `environment.host`; empty when not recorded.
    pub host: String,
}

/// What went wrong with the store. Every message names the store file and
/// says what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory {dir} for the results store {path}: {source}; pass --store PATH to keep runs elsewhere, or --no-store to not keep them")]
    CreateDir { path: PathBuf, dir: PathBuf, source: std::io::Error },

    #[error("the directory {dir} of the results store {path} does not exist; create it first (mtlab creates only the default store's directory, not one named by --store or $MTLAB_STORE), or pass another --store PATH")]
    NoDir { path: PathBuf, dir: PathBuf },

    #[error("cannot create the results store {path}: {source}; check that its directory is writable and that nothing but a store is at that name, or pass --store PATH to keep runs elsewhere")]
    Create { path: PathBuf, source: std::io::Error },

    #[error("cannot open the results store {path}: {source}; check that the file and its directory are readable and writable, or pass --store PATH to keep runs elsewhere")]
    CannotOpen { path: PathBuf, source: rusqlite::Error },

    #[error("{path} is not an SQLite database, so it cannot be the results store; move it away, or pass --store PATH to keep runs elsewhere")]
    NotADatabase { path: PathBuf },

    #[error("{path} is an SQLite database but not an mtlab results store (it has other tables or an unknown schema version); pass --store PATH to keep runs elsewhere")]
    NotAStore { path: PathBuf },

    #[error("the results store {path} has schema version {found}, written by a newer mtlab (this one understands up to version {supported}); upgrade mtlab, or pass --store PATH to keep runs elsewhere")]
    TooNew { path: PathBuf, found: i32, supported: i32 },

    #[error("no run {id} in the results store {path}; run `mtlab runs` to list the ids")]
    NoSuchRun { id: i64, path: PathBuf },

    #[error("the results store {path} stayed locked by another process for more than {}s while {doing}; retry when the other mtlab has finished", BUSY_TIMEOUT.as_secs())]
    Busy { path: PathBuf, doing: &'static str },

    #[error("the results store {path} is read-only ({doing}); make it writable, pass --store PATH to keep runs elsewhere, or --no-store to not keep them")]
    ReadOnly { path: PathBuf, doing: &'static str },

    #[error("the file system holding the results store {path} is full ({doing}); free some space, pass --store PATH to keep runs elsewhere, or --no-store to not keep them")]
    Full { path: PathBuf, doing: &'static str },

    #[error("the results store {path} is damaged ({what}); `sqlite3 {path} .recover` may save its runs, or pass --store PATH to start a new store")]
    Corrupt { path: PathBuf, what: String },

    #[error("results store {path}: {doing}: {source}")]
    Sqlite { path: PathBuf, doing: &'static str, source: rusqlite::Error },

    #[error("results store {path}: cannot encode {what} of the run as JSON: {source}")]
    Encode { path: PathBuf, what: &'static str, source: serde_json::Error },
}

/// Maps an SQLite error to the [`StoreError`] that tells the user what to do.
fn sql_err<'a>(path: &'a Path, doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |e| {
        let path = path.to_path_buf();
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => StoreError::NotADatabase { path },
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy { path, doing },
            Some(ErrorCode::ReadOnly) => StoreError::ReadOnly { path, doing },
            Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt { path, what: e.to_string() },
            Some(ErrorCode::CannotOpen) => StoreError::CannotOpen { path, source: e },
            Some(ErrorCode::DiskFull) => StoreError::Full { path, doing },
            // A write that failed for want of space (the -shm or -wal file
            // could not grow) comes back as a generic I/O error.
            Some(ErrorCode::SystemIoFailure) if dir_full(&path) => StoreError::Full { path, doing },
            _ => StoreError::Sqlite { path, doing, source: e },
        }
    }
}

fn dir_of(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// statvfs of the directory holding `path`.
fn statvfs_of(path: &Path) -> Option<libc::statvfs> {
    let c = std::ffi::CString::new(dir_of(path).as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c is a valid NUL-terminated path and st writable memory of the right type.
    (unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } == 0).then(|| {
        // SAFETY: statvfs succeeded and filled st.
        unsafe { st.assume_init() }
    })
}

/// Whether the file system holding `path` has no block left for this user.
fn dir_full(path: &Path) -> bool {
    statvfs_of(path).is_some_and(|st| st.f_bavail == 0)
}

/// Whether the file system holding `path` is mounted read-only.
fn dir_read_only(path: &Path) -> bool {
    statvfs_of(path).is_some_and(|st| st.f_flag & libc::ST_RDONLY != 0)
}

/// An open results store: one SQLite connection. Open one per thread or
/// process; SQLite serialises the writers.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store at `path`, creating the file and the schema if
    /// needed, and migrating a store written by an older mtlab. Its
    /// directory must exist: a mistyped `--store` (as root, anywhere) made
    /// directories nobody asked for (`create_default_dir` makes the
    /// default store's). A new store is private (0600): runs hold command
    /// lines, paths and host details.
    ///
    /// Refuses (without modifying it) a file that is not an SQLite database,
    /// an SQLite database that is not an mtlab store, and a store written by
    /// a newer mtlab.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(StoreError::NoDir { path: path.to_path_buf(), dir: dir.to_path_buf() });
            }
        }
        // SQLite would create it 0644; an empty file is a new database to it,
        // and its -wal and -shm files take the database file's mode.
        match crate::platform::safe_fs::create_new(path, 0o600) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(StoreError::Create { path: path.to_path_buf(), source }),
        }
        // No SQLITE_OPEN_URI: a file named `file:...` is a file, not a URI.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags)
            .map_err(sql_err(path, "opening"))
            .map_err(|e| match e {
                // SQLite reports a directory or unreadable file as CannotOpen
                // or as a generic error; either way name the path.
                StoreError::Sqlite { path, source, .. } => StoreError::CannotOpen { path, source },
                other => other,
            })?;
        // Set first, so every later statement waits for other writers.
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(path, "setting the busy timeout"))?;
        // The first read of the header: fails with NotADatabase on a foreign
        // file, before anything is written to it.
        let found = schema::user_version(&conn).map_err(sql_err(path, "reading the schema version"))?;
        schema::refuse_newer(path, found)?;
        // WAL: readers and one writer proceed at once, and a crash mid-write
        // leaves the previous state. A filesystem without shared memory keeps
        // the rollback journal; the store is still safe, only slower to share.
        set_wal(&conn, path)?;
        // Deleting a run deletes its configurations and measurements.
        conn.pragma_update(None, "foreign_keys", true).map_err(sql_err(path, "enabling foreign keys"))?;
        schema::migrate(&mut conn, path)?;
        Ok(Store { conn, path: path.to_path_buf() })
    }

    /// Opens an existing store for reading only (`mtlab runs`, `diff`): no
    /// write lock, no file created, so a store on a read-only file system
    /// (a mounted snapshot, a backup) can be listed and shown. A store of an
    /// older schema, or anything that is not a store of this version, goes
    /// through [`Store::open`], which migrates or refuses it.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        match Self::try_read_only(path, false) {
            Ok(Some(store)) => return Ok(store),
            Ok(None) => return Store::open(path),
            // A WAL store needs its -shm file, which a read-only file system
            // cannot hold: nothing can change the file there, so it is read
            // as immutable.
            Err(_) if dir_read_only(path) => {
                if let Ok(Some(store)) = Self::try_read_only(path, true) {
                    return Ok(store);
                }
            }
            Err(_) => {}
        }
        Store::open(path)
    }

    /// The store at `path` opened read-only, if it has this schema version.
    fn try_read_only(path: &Path, immutable: bool) -> Result<Option<Store>, StoreError> {
        let mut flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = if immutable {
            // Only this URI's own characters are special: the path is
            // percent-encoded whole.
            flags |= OpenFlags::SQLITE_OPEN_URI;
            let abs = std::path::absolute(path).map_err(|source| StoreError::Create { path: path.to_path_buf(), source })?;
            let mut uri = String::from("file:");
            for b in abs.as_os_str().as_encoded_bytes() {
                match b {
                    b'/' | b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => uri.push(*b as char),
                    _ => uri.push_str(&format!("%{b:02X}")),
                }
            }
            uri.push_str("?immutable=1");
            Connection::open_with_flags(uri, flags)
        } else {
            Connection::open_with_flags(path, flags)
        }
        .map_err(sql_err(path, "opening"))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err(path, "setting the busy timeout"))?;
        let found = schema::user_version(&conn).map_err(sql_err(path, "reading the schema version"))?;
        if found != SCHEMA_VERSION {
            return Ok(None);
        }
        Ok(Some(Store { conn, path: path.to_path_buf() }))
    }

    /// Where runs are kept unless `--store` says otherwise: `$MTLAB_STORE`
    /// if set, else `$XDG_DATA_HOME/mtlab/runs.sqlite` (the XDG base
    /// directory for user data), else `~/.local/share/mtlab/runs.sqlite`,
    /// else (no `$HOME`) `mtlab-runs.sqlite` in the current directory.
    pub fn default_path() -> PathBuf {
        default_path_from(|name| std::env::var_os(name))
    }

    /// Creates the directory of the default store `path` (`default_path`),
    /// private to this user where it is new.
    pub fn create_default_dir(path: &Path) -> Result<(), StoreError> {
        use std::os::unix::fs::DirBuilderExt;
        let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|source| StoreError::CreateDir {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            source,
        })
    }

    /// Whether the store is the default one (`default_path` from `HOME` or
    /// `XDG_DATA_HOME`), whose directory mtlab may create; `$MTLAB_STORE`
    /// names a store as `--store` does.
    pub fn is_default_location() -> bool {
        std::env::var_os("MTLAB_STORE").is_none_or(|v| v.is_empty())
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores `run` as a new run and returns its id. `run.id` is ignored:
    /// the store assigns ids. All or nothing: one transaction.
    pub fn insert(&mut self, run: &Run) -> Result<i64, StoreError> {
        let path = self.path.as_path();
        let encode = |what: &'static str, r: serde_json::Result<String>| {
            r.map_err(|source| StoreError::Encode { path: path.to_path_buf(), what, source })
        };
        let command_line = encode("the command line", serde_json::to_string(&run.command_line))?;
        let environment = encode("the environment", serde_json::to_string(&run.environment))?;
        let settings = encode("the settings", serde_json::to_string(&run.settings))?;
        let details = encode("the details", serde_json::to_string(&run.details))?;
        let notes = encode("the notes", serde_json::to_string(&run.notes))?;
        let params = run
            .configurations
            .iter()
            .map(|c| encode("configuration parameters", serde_json::to_string(&c.params)))
            .collect::<Result<Vec<_>, _>>()?;

        let doing = "storing a run";
        // IMMEDIATE: take the write lock now (waiting up to the busy
        // timeout), not at the first INSERT, where a lock upgrade could fail
        // at once with "database is locked".
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err(path, doing))?;
        tx.execute(
            "INSERT INTO runs (study, title, started, duration_s, mtlab_version, command_line,
                               environment, settings, details, notes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                run.study,
                run.title,
                run.started,
                run.duration_s,
                run.mtlab_version,
                command_line,
                environment,
                settings,
                details,
                notes
            ],
        )
        .map_err(sql_err(path, doing))?;
        let id = tx.last_insert_rowid();
        {
            let mut insert = tx
                .prepare("INSERT INTO configurations (run_id, position, name, params, baseline) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(sql_err(path, doing))?;
            for (position, (c, params)) in run.configurations.iter().zip(&params).enumerate() {
                insert.execute(params![id, position as i64, c.name, params, c.baseline]).map_err(sql_err(path, doing))?;
            }
            let mut insert = tx
                .prepare(
                    "INSERT INTO measurements (run_id, position, configuration, metric, unit, lower_is_better, \"values\")
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql_err(path, doing))?;
            for (position, m) in run.measurements.iter().enumerate() {
                insert
                    .execute(params![
                        id,
                        position as i64,
                        m.configuration,
                        m.metric,
                        m.unit,
                        m.lower_is_better,
                        values_to_json(&m.values)
                    ])
                    .map_err(sql_err(path, doing))?;
            }
        }
        tx.commit().map_err(sql_err(path, doing))?;
        Ok(id)
    }

    /// The run with this id, exactly as inserted, with `id: Some(id)`.
    pub fn get(&self, id: i64) -> Result<Run, StoreError> {
        let path = self.path.as_path();
        let doing = "reading a run";
        // One read transaction: the run and its rows from one snapshot, even
        // if another process deletes the run meanwhile.
        let tx = self.conn.unchecked_transaction().map_err(sql_err(path, doing))?;
        type RunRow = (String, String, String, f64, String, String, String, String, String, String);
        let row: Option<RunRow> = tx
            .query_row(
                "SELECT study, title, started, duration_s, mtlab_version, command_line,
                        environment, settings, details, notes
                 FROM runs WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                        r.get(9)?,
                    ))
                },
            )
            .optional()
            .map_err(sql_err(path, doing))?;
        let Some((study, title, started, duration_s, mtlab_version, command_line, environment, settings, details, notes)) =
            row
        else {
            return Err(StoreError::NoSuchRun { id, path: path.to_path_buf() });
        };
        let decode = Decoder { path, id };

        let mut configurations = Vec::new();
        {
            let mut select = tx
                .prepare("SELECT name, params, baseline FROM configurations WHERE run_id = ?1 ORDER BY position")
                .map_err(sql_err(path, doing))?;
            let rows = select
                .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?)))
                .map_err(sql_err(path, doing))?;
            for row in rows {
                let (name, params, baseline) = row.map_err(sql_err(path, doing))?;
                let params = decode.json("configurations.params", &params)?;
                configurations.push(Configuration { name, params, baseline });
            }
        }
        let mut measurements = Vec::new();
        {
            let mut select = tx
                .prepare(
                    "SELECT configuration, metric, unit, lower_is_better, \"values\"
                     FROM measurements WHERE run_id = ?1 ORDER BY position",
                )
                .map_err(sql_err(path, doing))?;
            let rows = select
                .query_map([id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, bool>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .map_err(sql_err(path, doing))?;
            for row in rows {
                let (configuration, metric, unit, lower_is_better, values) = row.map_err(sql_err(path, doing))?;
                let values = values_from_json(&values).map_err(|what| decode.corrupt("measurements.values", &what))?;
                measurements.push(Measurement { configuration, metric, unit, lower_is_better, values });
            }
        }
        drop(tx); // read-only: rolling back ends the snapshot

        Ok(Run {
            id: Some(id),
            study,
            title,
            started,
            duration_s,
            mtlab_version,
            command_line: decode.json("command_line", &command_line)?,
            environment: decode.json("environment", &environment)?,
            settings: decode.json("settings", &settings)?,
            configurations,
            measurements,
            details: decode.json("details", &details)?,
            notes: decode.json("notes", &notes)?,
        })
    }

    /// Summaries of the stored runs, newest first (by `started`, then by id
    /// for runs started in the same second).
    pub fn list(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, StoreError> {
        let path = self.path.as_path();
        let doing = "listing runs";
        // Two statements rather than `?1 IS NULL OR study = ?1`, so SQLite
        // can use the (study, started) index when filtering.
        let mut sql = String::from(
            "SELECT r.id, r.study, r.title, r.started, r.duration_s,
                    (SELECT count(*) FROM configurations c WHERE c.run_id = r.id),
                    (SELECT count(*) FROM measurements m WHERE m.run_id = r.id),
                    coalesce(json_extract(r.environment, '$.host'), '')
             FROM runs r",
        );
        if filter.study.is_some() {
            sql.push_str(" WHERE r.study = ?2");
        }
        sql.push_str(" ORDER BY r.started DESC, r.id DESC LIMIT ?1");
        // LIMIT -1 is SQLite's "no limit".
        let limit = filter.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let mut select = self.conn.prepare(&sql).map_err(sql_err(path, doing))?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok(RunSummary {
                id: r.get(0)?,
                study: r.get(1)?,
                title: r.get(2)?,
                started: r.get(3)?,
                duration_s: r.get(4)?,
                configurations: r.get::<_, i64>(5)? as usize,
                measurements: r.get::<_, i64>(6)? as usize,
                host: r.get::<_, rusqlite::types::Value>(7).map(|v| match v {
                    rusqlite::types::Value::Text(s) => s,
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    _ => String::new(),
                })?,
            })
        };
        let rows = match &filter.study {
            Some(study) => select.query_map(params![limit, study], map),
            None => select.query_map(params![limit], map),
        }
        .map_err(sql_err(path, doing))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql_err(path, doing))
    }

    /// Deletes a run with its configurations and measurements. Its id is
    /// not reused.
    pub fn delete(&mut self, id: i64) -> Result<(), StoreError> {
        let changed =
            self.conn.execute("DELETE FROM runs WHERE id = ?1", [id]).map_err(sql_err(&self.path, "deleting a run"))?;
        if changed == 0 {
            return Err(StoreError::NoSuchRun { id, path: self.path.clone() });
        }
        Ok(())
    }
}

/// Puts the file in WAL mode (a persistent property of the file, so only
/// its first opener actually switches).
///
/// Switching needs an exclusive lock, and SQLite answers SQLITE_BUSY at once
/// rather than calling the busy handler when another connection has the file
/// open — which is what happens when several mtlab processes open a fresh
/// store together. So retry, with backoff, up to [`BUSY_TIMEOUT`].
fn set_wal(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let doing = "switching to WAL mode";
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).map_err(sql_err(path, doing))?;
        if mode.eq_ignore_ascii_case("wal") {
            return Ok(());
        }
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            // Anything but "wal" (e.g. a filesystem without shared memory):
            // keep the rollback journal, which is just as safe, only slower
            // to share between processes.
            Ok(_) => return Ok(()),
            Err(e)
                if matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(sql_err(path, doing)(e)),
        }
    }
}

/// [`Store::default_path`] with the environment passed in, so it can be
/// tested without touching the process environment.
fn default_path_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(path) = set("MTLAB_STORE") {
        return PathBuf::from(path);
    }
    // The XDG spec says a relative XDG_DATA_HOME is invalid and is ignored.
    if let Some(dir) = set("XDG_DATA_HOME").map(PathBuf::from).filter(|d| d.is_absolute()) {
        return dir.join("mtlab").join("runs.sqlite");
    }
    match set("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/mtlab/runs.sqlite"),
        None => PathBuf::from("mtlab-runs.sqlite"),
    }
}

/// Decodes the JSON columns of one run, naming the run and the column when
/// one was damaged (e.g. edited by hand).
struct Decoder<'a> {
    path: &'a Path,
    id: i64,
}

impl Decoder<'_> {
    fn json<T: serde::de::DeserializeOwned>(&self, column: &str, text: &str) -> Result<T, StoreError> {
        serde_json::from_str(text).map_err(|e| self.corrupt(column, &e.to_string()))
    }

    fn corrupt(&self, column: &str, what: &str) -> StoreError {
        StoreError::Corrupt {
            path: self.path.to_path_buf(),
            what: format!("run {}: column {column} does not decode: {what}", self.id),
        }
    }
}
