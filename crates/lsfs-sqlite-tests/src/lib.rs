//! A real SQLite, built with `SQLITE_ENABLE_BATCH_ATOMIC_WRITE` (as
//! Android builds it), for tests through a mount of lsfs: [`Db`] is the
//! little of its C API they need. The tests are in `tests/`.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr;

use libsqlite3_sys as ffi;

/// An open database connection.
pub struct Db {
    db: *mut ffi::sqlite3,
}

// SAFETY: SQLite is built thread-safe (SQLITE_THREADSAFE=1 in the bundled
// build), so a connection may move between threads.
unsafe impl Send for Db {}

impl Db {
    /// Open (creating) the database at `path`.
    pub fn open(path: &Path) -> Result<Db, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        let mut db = ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE;
        // SAFETY: `c` is a valid C string and `db` a place for the handle;
        // SQLite sets it even on failure, and it is closed by `Db`'s drop.
        let rc = unsafe { ffi::sqlite3_open_v2(c.as_ptr(), &mut db, flags, ptr::null()) };
        let me = Db { db };
        if rc != ffi::SQLITE_OK {
            return Err(format!("open {}: {}", path.display(), me.errmsg()));
        }
        Ok(me)
    }

    fn errmsg(&self) -> String {
        // SAFETY: `db` is an open handle; the message lives until the next call.
        unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(self.db)) }
            .to_string_lossy()
            .into_owned()
    }

    /// Run `sql` (one or more statements), ignoring rows.
    pub fn exec(&self, sql: &str) -> Result<(), String> {
        let c = CString::new(sql).map_err(|e| e.to_string())?;
        // SAFETY: valid handle and C string; no callback.
        let rc = unsafe {
            ffi::sqlite3_exec(self.db, c.as_ptr(), None, ptr::null_mut(), ptr::null_mut())
        };
        if rc != ffi::SQLITE_OK {
            return Err(format!("{sql}: {} (code {rc})", self.errmsg()));
        }
        Ok(())
    }

    /// The first column of the first row of `sql`, as text.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let c = CString::new(sql).map_err(|e| e.to_string())?;
        let mut stmt = ptr::null_mut();
        // SAFETY: valid handle and C string; `stmt` is finalized below.
        let rc =
            unsafe { ffi::sqlite3_prepare_v2(self.db, c.as_ptr(), -1, &mut stmt, ptr::null_mut()) };
        if rc != ffi::SQLITE_OK {
            return Err(format!("{sql}: {}", self.errmsg()));
        }
        // SAFETY: `stmt` was prepared above; the text is copied before finalize.
        let out = unsafe {
            match ffi::sqlite3_step(stmt) {
                ffi::SQLITE_ROW => {
                    let t = ffi::sqlite3_column_text(stmt, 0);
                    Ok(if t.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(t.cast()).to_string_lossy().into_owned()
                    })
                }
                rc => Err(format!("{sql}: {} (code {rc})", self.errmsg())),
            }
        };
        // SAFETY: finalizing the statement prepared above, once.
        unsafe { ffi::sqlite3_finalize(stmt) };
        out
    }

    /// [`Db::query`] as an integer.
    pub fn query_i64(&self, sql: &str) -> Result<i64, String> {
        let t = self.query(sql)?;
        t.parse()
            .map_err(|_| format!("{sql}: {t:?} is not an integer"))
    }

    /// Whether SQLite found the main database file able to write a batch
    /// atomically (`SQLITE_IOCAP_BATCH_ATOMIC`): on Linux, F2FS's
    /// GET_FEATURES ioctl said so when the file was opened.
    pub fn batch_atomic(&self) -> bool {
        let mut file: *mut ffi::sqlite3_file = ptr::null_mut();
        let main = c"main";
        // SAFETY: FILE_POINTER writes the main database's sqlite3_file
        // pointer to `file`, which lives here.
        let rc = unsafe {
            ffi::sqlite3_file_control(
                self.db,
                main.as_ptr(),
                ffi::SQLITE_FCNTL_FILE_POINTER,
                (&mut file as *mut *mut ffi::sqlite3_file).cast(),
            )
        };
        if rc != ffi::SQLITE_OK || file.is_null() {
            return false;
        }
        // SAFETY: `file` is the open file SQLite handed out; its methods
        // table is SQLite's own, valid while the connection is open.
        unsafe {
            let methods = (*file).pMethods;
            if methods.is_null() {
                return false;
            }
            match (*methods).xDeviceCharacteristics {
                Some(f) => f(file) & ffi::SQLITE_IOCAP_BATCH_ATOMIC != 0,
                None => false,
            }
        }
    }
}

/// One small transaction as on a phone: a row of 3,000 bytes inserted and
/// another row rewritten, a few pages changed. The `i`-th transaction
/// rewrites row `i / 2 + 1`, which exists by then.
pub fn small_transaction(db: &Db, i: u64) -> Result<(), String> {
    db.exec(&format!(
        "BEGIN; \
         INSERT INTO t(v) VALUES(randomblob(3000)); \
         UPDATE t SET v = randomblob(200) WHERE id = {}; \
         COMMIT;",
        i / 2 + 1
    ))
}

/// The table [`small_transaction`] writes to.
pub const SMALL_TRANSACTION_TABLE: &str = "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);";

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: the handle from open, closed once (every statement is finalized).
        unsafe { ffi::sqlite3_close(self.db) };
    }
}
