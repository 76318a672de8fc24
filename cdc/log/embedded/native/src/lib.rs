//! Optional accelerator of the embedded log: one batch of records into SQLite with the
//! interpreter lock released for the whole batch.
//!
//! Python's `executemany` binds each row from Python objects and drops and retakes the lock
//! around every row's `sqlite3_step`, so the log's writer thread and the threads that prepare
//! records (the snapshot's readers) convoy on the lock. Here the rows are bound and stepped in
//! a loop that runs without it, on the caller's own connection, inside the transaction the
//! caller opened, through the very SQLite library the `sqlite3` module uses: the symbols are
//! looked up in the already loaded `libsqlite3.so.0` (`RTLD_NOLOAD`), never a second copy,
//! which would break SQLite's POSIX locks (sqlite.org/howtocorrupt.html, 2.2.1).
//! `cdc/log/embedded/appender.py` finds the connection's handle and checks it before use.

use pyo3::exceptions::PyOSError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_LAZY: c_int = 0x1;
const RTLD_NOLOAD: c_int = 0x4;
const SQLITE_OK: c_int = 0;
const SQLITE_DONE: c_int = 101;

type Db = *mut c_void;
type Stmt = *mut c_void;
type Prepare =
    unsafe extern "C" fn(Db, *const c_char, c_int, *mut Stmt, *mut *const c_char) -> c_int;
type BindInt64 = unsafe extern "C" fn(Stmt, c_int, i64) -> c_int;
type BindBlob = unsafe extern "C" fn(
    Stmt,
    c_int,
    *const c_void,
    c_int,
    Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int;
type BindNull = unsafe extern "C" fn(Stmt, c_int) -> c_int;
type StepFn = unsafe extern "C" fn(Stmt) -> c_int;
type ErrCode = unsafe extern "C" fn(Db) -> c_int;
type ErrMsg = unsafe extern "C" fn(Db) -> *const c_char;
type ErrStr = unsafe extern "C" fn(c_int) -> *const c_char;
type DbFilename = unsafe extern "C" fn(Db, *const c_char) -> *const c_char;
type LibVersion = unsafe extern "C" fn() -> c_int;

/// The SQLite functions of the loaded library.
#[pyclass(frozen, module = "cdc.log._native")]
struct Sqlite {
    prepare: Prepare,
    bind_int64: BindInt64,
    bind_blob: BindBlob,
    bind_null: BindNull,
    step: StepFn,
    reset: StepFn,
    finalize: StepFn,
    extended_errcode: ErrCode,
    errmsg: ErrMsg,
    errstr: ErrStr,
    db_filename: DbFilename,
    libversion_number: LibVersion,
}

/// One record's key and value as raw parts (NULL as a null pointer), valid while the caller
/// holds the records; `head` is the id of the value head the value was stripped of.
struct Part {
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    head: Option<i64>,
    pos: *const u8,
    pos_len: usize,
    /// The id of the frame the value was stripped of (`append`'s `frame`).
    frame: Option<i64>,
}

/// The start of a value written with `schemas.enable` (`{"schema":{...},"payload":...}`).
const WRAPPED: &[u8] = b"{\"schema\":{";
/// Where such a value's head ends: the first `,"payload":` (it cannot occur earlier: a Connect
/// schema has no `payload` key, and a quote inside a JSON string is escaped).
const PAYLOAD: &[u8] = b",\"payload\":";
/// `append`'s result code for a value whose head is not among the known ones; the message is
/// the record's index. Nothing was inserted: the caller stores the head and calls again.
const UNKNOWN_HEAD: i32 = -1;

/// `value` without one of `heads` (and without its closing brace), and that head's id; the
/// value itself and `None` when it is not wrapped; `Err(())` when it is wrapped in a head not
/// among `heads`.
fn strip<'a>(value: &'a [u8], heads: &[(&[u8], i64)]) -> Result<(&'a [u8], Option<i64>), ()> {
    if !value.starts_with(WRAPPED) || value.last() != Some(&b'}') {
        return Ok((value, None));
    }
    for &(head, id) in heads {
        if value.len() > head.len() && value.starts_with(head) {
            return Ok((&value[head.len()..value.len() - 1], Some(id)));
        }
    }
    if value.windows(PAYLOAD.len()).any(|w| w == PAYLOAD) {
        Err(())
    } else {
        Ok((value, None))
    }
}

/// The longest prefix and suffix every value of `values` shares, as lengths that never overlap
/// inside the shortest value.
fn common_frame(values: &[&[u8]]) -> (usize, usize) {
    let Some((first, rest)) = values.split_first() else {
        return (0, 0);
    };
    let (mut prefix, mut suffix, mut shortest) = (first.len(), first.len(), first.len());
    for value in rest {
        prefix = first[..prefix]
            .iter()
            .zip(value.iter())
            .take_while(|(a, b)| a == b)
            .count();
        suffix = first[first.len() - suffix..]
            .iter()
            .rev()
            .zip(value.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        shortest = shortest.min(value.len());
    }
    prefix = prefix.min(shortest);
    (prefix, suffix.min(shortest - prefix))
}

/// What the unlocked loop needs: the connection, its prepared statement, and the parts, which
/// stay valid because `append` holds their objects until the loop is done.
struct Batch {
    db: usize,
    stmt: usize,
    parts: Vec<Part>,
    framed: bool,
}
unsafe impl Send for Batch {}

/// The handle of an object this process loaded already (never loads one).
fn loaded(file: &str) -> PyResult<*mut c_void> {
    let cname = CString::new(file)?;
    let handle = unsafe { dlopen(cname.as_ptr(), RTLD_LAZY | RTLD_NOLOAD) };
    if handle.is_null() {
        return Err(PyOSError::new_err(format!(
            "{file} is not loaded in this process"
        )));
    }
    Ok(handle)
}

/// Function `name` of the loaded object `handle` (`file`, for the error message).
fn symbol<T: Copy>(handle: *mut c_void, file: &str, name: &str) -> PyResult<T> {
    let cname = CString::new(name).expect("no NUL in a symbol name");
    let found = unsafe { dlsym(handle, cname.as_ptr()) };
    if found.is_null() {
        return Err(PyOSError::new_err(format!(
            "symbol {name} missing from the SQLite library {file}"
        )));
    }
    // SAFETY: T is the function pointer type of `name` in sqlite3.h.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&found) })
}

#[pymethods]
impl Sqlite {
    /// The functions of `library` (`libsqlite3.so.0`), if this process loaded it already and
    /// `module` (the `_sqlite3` extension's file) resolves SQLite to that very library, not to a
    /// copy of its own.
    #[new]
    fn new(library: &str, module: &str) -> PyResult<Self> {
        let handle = loaded(library)?;
        let step: *mut c_void = symbol(handle, library, "sqlite3_step")?;
        let module_step: Option<*mut c_void> = symbol(loaded(module)?, module, "sqlite3_step").ok();
        if module_step != Some(step) {
            return Err(PyOSError::new_err(format!(
                "{module} uses its own copy of SQLite, not {library}"
            )));
        }
        Ok(Sqlite {
            prepare: symbol(handle, library, "sqlite3_prepare_v2")?,
            bind_int64: symbol(handle, library, "sqlite3_bind_int64")?,
            bind_blob: symbol(handle, library, "sqlite3_bind_blob")?,
            bind_null: symbol(handle, library, "sqlite3_bind_null")?,
            step: symbol(handle, library, "sqlite3_step")?,
            reset: symbol(handle, library, "sqlite3_reset")?,
            finalize: symbol(handle, library, "sqlite3_finalize")?,
            extended_errcode: symbol(handle, library, "sqlite3_extended_errcode")?,
            errmsg: symbol(handle, library, "sqlite3_errmsg")?,
            errstr: symbol(handle, library, "sqlite3_errstr")?,
            db_filename: symbol(handle, library, "sqlite3_db_filename")?,
            libversion_number: symbol(handle, library, "sqlite3_libversion_number")?,
        })
    }

    /// `sqlite3_libversion_number()` of the library.
    fn version(&self) -> i32 {
        unsafe { (self.libversion_number)() }
    }

    /// The file of connection `db`'s main database (`sqlite3_db_filename`).
    fn filename(&self, db: usize) -> Option<String> {
        let name = unsafe { (self.db_filename)(db as Db, c"main".as_ptr()) };
        if name.is_null() {
            return None;
        }
        Some(
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// The prefix and suffix that values of `records` share once stripped of their `heads` (as
    /// `append` strips them), if there are at least `min_records` values and the frame holds
    /// at least `min_bytes`; `None` otherwise, or when a value's head is not in `heads`.
    fn frame<'py>(
        &self,
        py: Python<'py>,
        records: &Bound<'py, PyList>,
        heads: Vec<(Bound<'py, PyBytes>, i64)>,
        min_records: usize,
        min_bytes: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        if records.len() < min_records {
            return Ok(None);
        }
        let heads: Vec<(&[u8], i64)> = heads.iter().map(|(h, id)| (h.as_bytes(), *id)).collect();
        let mut owners = Vec::with_capacity(records.len());
        let value_name = intern!(py, "value");
        for record in records.iter() {
            let value = record.getattr(value_name)?;
            if !value.is_none() {
                owners.push(value.downcast_into::<PyBytes>()?);
            }
        }
        let mut values = Vec::with_capacity(owners.len());
        for value in &owners {
            match strip(value.as_bytes(), &heads) {
                Ok((stored, _)) => values.push(stored),
                Err(()) => return Ok(None),
            }
        }
        if values.len() < min_records {
            return Ok(None);
        }
        // From a few values spread over the back of the batch, not all of them: a batch may
        // start with a record held back from the one before (a snapshot's last row of a piece,
        // from another moment), and one odd value must not shrink everyone's frame. A value
        // the frame does not fit is stored whole by `append`.
        let n = values.len();
        let samples = [values[n / 4], values[n / 2], values[3 * n / 4], values[n - 1]];
        let (prefix, suffix) = common_frame(&samples);
        if prefix + suffix < min_bytes {
            return Ok(None);
        }
        let first = samples[0];
        Ok(Some((
            PyBytes::new(py, &first[..prefix]),
            PyBytes::new(py, &first[first.len() - suffix..]),
        )))
    }

    /// Insert `records` (objects with `key`, `value` and `pos`, each bytes or None) with `sql`,
    /// whose parameters are topic id, partition, offset, key, value, timestamp, head id,
    /// position and frame id; offsets count up from `first`. A wrapped value that starts with
    /// one of `heads` (`(head, id)` pairs) is stored without it, with its id; then a value
    /// that starts and ends with `frame`'s prefix and suffix (`(id, prefix, suffix)`) is
    /// stored without them, with the frame's id. Returns `None`, SQLite's extended error code
    /// and message, or `UNKNOWN_HEAD` and the index of a record whose head is not in `heads`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (db, sql, topic_id, partition, first, ts_ms, records, heads, frame=None))]
    fn append(
        &self,
        py: Python<'_>,
        db: usize,
        sql: &str,
        topic_id: i64,
        partition: i64,
        first: i64,
        ts_ms: i64,
        records: &Bound<'_, PyList>,
        heads: Vec<(Bound<'_, PyBytes>, i64)>,
        frame: Option<(i64, Bound<'_, PyBytes>, Bound<'_, PyBytes>)>,
    ) -> PyResult<Option<(i32, String)>> {
        let heads: Vec<(&[u8], i64)> = heads.iter().map(|(h, id)| (h.as_bytes(), *id)).collect();
        let frame = frame
            .as_ref()
            .map(|(id, prefix, suffix)| (*id, prefix.as_bytes(), suffix.as_bytes()));
        // The keys and values themselves are held until the call returns: the parts point
        // into them, whatever happens to the records meanwhile.
        let mut owners = Vec::with_capacity(3 * records.len());
        let mut parts = Vec::with_capacity(records.len());
        let (key_name, value_name) = (intern!(py, "key"), intern!(py, "value"));
        let pos_name = intern!(py, "pos");
        for (index, record) in records.iter().enumerate() {
            let (key, value) = (record.getattr(key_name)?, record.getattr(value_name)?);
            let pos = record.getattr(pos_name)?;
            let ((key_ptr, key_len), (mut value_ptr, mut value_len)) = (raw(&key)?, raw(&value)?);
            let (pos_ptr, pos_len) = raw(&pos)?;
            let (mut head, mut framed) = (None, None);
            if !value_ptr.is_null() {
                let whole = unsafe { std::slice::from_raw_parts(value_ptr, value_len) };
                let Ok((mut stored, id)) = strip(whole, &heads) else {
                    return Ok(Some((UNKNOWN_HEAD, index.to_string())));
                };
                if let Some((frame_id, prefix, suffix)) = frame {
                    if stored.len() >= prefix.len() + suffix.len()
                        && stored.starts_with(prefix)
                        && stored.ends_with(suffix)
                    {
                        stored = &stored[prefix.len()..stored.len() - suffix.len()];
                        framed = Some(frame_id);
                    }
                }
                (value_ptr, value_len, head) = (stored.as_ptr(), stored.len(), id);
            }
            parts.push(Part {
                key: key_ptr,
                key_len,
                value: value_ptr,
                value_len,
                head,
                pos: pos_ptr,
                pos_len,
                frame: framed,
            });
            owners.push(key);
            owners.push(value);
            owners.push(pos);
        }
        let sql = CString::new(sql)?;
        let handle = db as Db;
        let mut stmt: Stmt = std::ptr::null_mut();
        // Prepared while the lock is held: a live statement keeps the connection open
        // (sqlite3_close_v2 waits for it) should another thread close it during the loop.
        if unsafe { (self.prepare)(handle, sql.as_ptr(), -1, &mut stmt, std::ptr::null_mut()) } != 0
        {
            return Ok(Some(unsafe { self.error(handle) }));
        }
        let batch = Batch {
            db,
            stmt: stmt as usize,
            parts,
            framed: frame.is_some(),
        };
        let params = [topic_id, partition, first, ts_ms];
        let failed = py.allow_threads(move || unsafe { self.insert(&batch, params) });
        drop(owners);
        Ok(failed)
    }
}

impl Sqlite {
    /// Binds and steps every part, then finalizes the statement (on every path).
    unsafe fn insert(
        &self,
        batch: &Batch,
        [topic_id, partition, first, ts_ms]: [i64; 4],
    ) -> Option<(i32, String)> {
        let (db, stmt) = (batch.db as Db, batch.stmt as Stmt);
        let mut failed = None;
        for (i, part) in batch.parts.iter().enumerate() {
            let bound = [
                (self.bind_int64)(stmt, 1, topic_id),
                (self.bind_int64)(stmt, 2, partition),
                (self.bind_int64)(stmt, 3, first + i as i64),
                self.bind(stmt, 4, part.key, part.key_len),
                self.bind(stmt, 5, part.value, part.value_len),
                (self.bind_int64)(stmt, 6, ts_ms),
                match part.head {
                    Some(id) => (self.bind_int64)(stmt, 7, id),
                    None => (self.bind_null)(stmt, 7),
                },
                self.bind(stmt, 8, part.pos, part.pos_len),
                // Without a frame the statement may have no ninth parameter (an 8-column
                // INSERT): it is bound only when a frame was given.
                match (batch.framed, part.frame) {
                    (false, _) => SQLITE_OK,
                    (true, Some(id)) => (self.bind_int64)(stmt, 9, id),
                    (true, None) => (self.bind_null)(stmt, 9),
                },
            ];
            // A refused bind (a blob over SQLite's length limit) leaves the parameter NULL:
            // stepping then would store a tombstone instead of the value. It sets no error on
            // the connection, so its own code is reported.
            if let Some(&rc) = bound.iter().find(|&&rc| rc != SQLITE_OK) {
                let message = CStr::from_ptr((self.errstr)(rc))
                    .to_string_lossy()
                    .into_owned();
                failed = Some((rc, message));
                break;
            }
            if (self.step)(stmt) != SQLITE_DONE {
                failed = Some(self.error(db));
                break;
            }
            (self.reset)(stmt);
        }
        (self.finalize)(stmt);
        failed
    }

    unsafe fn bind(&self, stmt: Stmt, index: c_int, data: *const u8, len: usize) -> c_int {
        if data.is_null() {
            (self.bind_null)(stmt, index)
        } else {
            // SQLITE_STATIC (None): the bytes outlive the step that reads them.
            (self.bind_blob)(stmt, index, data as *const c_void, len as c_int, None)
        }
    }

    unsafe fn error(&self, db: Db) -> (i32, String) {
        let message = CStr::from_ptr((self.errmsg)(db))
            .to_string_lossy()
            .into_owned();
        ((self.extended_errcode)(db), message)
    }
}

/// A bytes object's data, or a null pointer for None.
fn raw(item: &Bound<'_, PyAny>) -> PyResult<(*const u8, usize)> {
    if item.is_none() {
        return Ok((std::ptr::null(), 0));
    }
    let bytes = item.downcast::<PyBytes>()?;
    let data = bytes.as_bytes();
    if data.len() > i32::MAX as usize {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a record over 2 GiB",
        ));
    }
    Ok((data.as_ptr(), data.len()))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Sqlite>()?;
    Ok(())
}
