//! A real SQLite (built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE) on a mount
//! of the lsfs engine, with the kernel's writeback cache (docs/ATOMIC.md):
//! it finds the atomic-write feature and commits without a journal, and
//! every device image taken while it works (a crash at that moment)
//! recovers to a database that is whole, holds every transaction
//! acknowledged before the image and none in part. The same in WAL mode.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_fuse::{spawn_mount, MountHandle, MountOptions, Op, RequestCounters};
use lsfs_sqlite_tests::{small_transaction, Db, SMALL_TRANSACTION_TABLE};
use lsfs_vfs::{Vfs, ROOT_INO};

fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    eprintln!("SKIPPED: /dev/fuse does not exist; FUSE mount tests cannot run here");
    false
}

fn engine(bytes: u64) -> Lsfs {
    let opts = MkfsOptions {
        segment_blocks: 256,
        label: "sqlite".into(),
    };
    Lsfs::mkfs(
        Box::new(MemDevice::new(bytes)),
        &opts,
        MountConfig::default(),
    )
    .expect("mkfs")
}

/// A mount on a fresh temporary directory; unmounted when dropped (the
/// handle's drop), also when a test fails.
struct Mounted<V: Vfs + 'static> {
    handle: Option<MountHandle>,
    vfs: Arc<Mutex<V>>,
    counters: Arc<RequestCounters>,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl<V: Vfs + 'static> Mounted<V> {
    /// Mounted with the writeback cache; the atomic-write ioctls served
    /// if `atomic_writes` (and the `Vfs` has them).
    fn new(v: V, atomic_writes: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("mnt");
        std::fs::create_dir(&root).unwrap();
        let counters = Arc::new(RequestCounters::default());
        let opts = MountOptions {
            fsname: "lsfs-sqlite-test".into(),
            writeback_cache: true,
            counters: counters.clone(),
            atomic_writes,
            ..MountOptions::default()
        };
        let vfs = Arc::new(Mutex::new(v));
        let handle = spawn_mount(vfs.clone(), &root, &opts).expect("mount");
        Mounted {
            handle: Some(handle),
            vfs,
            counters,
            root,
            _dir: dir,
        }
    }

    fn unmount(mut self) {
        self.handle
            .take()
            .unwrap()
            .unmount()
            .expect("clean unmount");
    }
}

/// Requests that make a file: a rollback journal shows up here.
fn creates(c: &RequestCounters) -> u64 {
    c.get(Op::Mknod) + c.get(Op::Create)
}

fn transaction(db: &Db, i: u64) {
    small_transaction(db, i).unwrap();
}

/// What `N` small transactions cost in one journal mode on lsfs.
struct Cost {
    flushes: u64,
    bytes: u64,
    creates: u64,
    commits: u64,
    batch_atomic: bool,
}

fn run_mode(mode: &str, atomic_writes: bool, n: u64) -> Cost {
    let m = Mounted::new(engine(128 << 20), atomic_writes);
    let db = Db::open(&m.root.join("db")).unwrap();
    db.exec(mode).unwrap();
    db.exec(SMALL_TRANSACTION_TABLE).unwrap();
    let device = |m: &Mounted<Lsfs>| m.vfs.lock().unwrap().store.device_counters();
    let (d0, c0) = (device(&m), creates(&m.counters));
    let commits0 = m.vfs.lock().unwrap().atomic.stats.commits;
    for i in 0..n {
        transaction(&db, i);
    }
    let d1 = device(&m);
    let cost = Cost {
        flushes: d1.flushes - d0.flushes,
        bytes: d1.write_bytes - d0.write_bytes,
        creates: creates(&m.counters) - c0,
        commits: m.vfs.lock().unwrap().atomic.stats.commits - commits0,
        batch_atomic: db.batch_atomic(),
    };
    assert_eq!(db.query_i64("SELECT count(*) FROM t").unwrap(), n as i64);
    drop(db);
    m.unmount();
    eprintln!(
        "{mode:<60} atomic ioctls {}: {:.2} flushes, {:.1} KiB written, {:.2} files made per transaction",
        if atomic_writes { "on " } else { "off" },
        cost.flushes as f64 / n as f64,
        cost.bytes as f64 / n as f64 / 1024.0,
        cost.creates as f64 / n as f64,
    );
    cost
}

/// SQLite finds the feature (GET_FEATURES) on lsfs and commits each
/// transaction by START, its writes and COMMIT: no journal file is ever
/// made, and each commit costs the device one flush, with at most one more
/// for SQLite's fsync after it. With the ioctls off the same SQLite makes
/// a journal every time and flushes more (the check can fail); WAL mode
/// is measured beside them.
#[test]
fn sqlite_commits_without_a_journal_on_lsfs() {
    if !fuse_available() {
        return;
    }
    const N: u64 = 40;
    let batch = run_mode("PRAGMA journal_mode=DELETE;", true, N);
    assert!(
        batch.batch_atomic,
        "SQLite did not find atomic writes on lsfs"
    );
    assert_eq!(batch.creates, 0, "a journal file was made");
    assert_eq!(batch.commits, N, "atomic commits");
    // The commit's, and the fsync SQLite makes after it when the kernel
    // sends the file's new mtime first (about every other transaction).
    assert!(
        batch.flushes <= 2 * N,
        "{} flushes for {N} transactions",
        batch.flushes
    );

    let rollback = run_mode("PRAGMA journal_mode=DELETE;", false, N);
    assert!(!rollback.batch_atomic);
    assert!(rollback.creates >= N, "no journal without atomic writes?");
    assert_eq!(rollback.commits, 0);
    assert!(
        rollback.flushes > batch.flushes,
        "the journal costs no flushes?"
    );
    // Exclusive locking keeps the WAL index in memory: a shared mapping of
    // a file on the mount, served by this same process, can deadlock it
    // (unmapping it writes its pages back while holding the process's
    // memory map lock, which the server's threads may need to allocate).
    let wal = run_mode(
        "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL;",
        true,
        N,
    );
    assert_eq!(wal.commits, 0, "WAL mode used atomic writes");
    eprintln!(
        "rollback journal against batch atomic: {:.2} times the flushes, {:.2} times the bytes",
        rollback.flushes as f64 / batch.flushes as f64,
        rollback.bytes as f64 / batch.bytes as f64
    );
}

/// The database files `names` (those that exist) as a crash at `image`
/// leaves them, copied out into `dir` for SQLite to open (and recover).
fn files_after_crash(image: Vec<u8>, names: &[&str], dir: &Path) {
    let mut fs = match Lsfs::open(
        Box::new(MemDevice::from_bytes(image.clone())),
        MountConfig::default(),
    ) {
        Ok(fs) => fs,
        Err(e) => {
            // Kept for `lsfs fsck` and `lsfs inspect`.
            let keep =
                std::env::temp_dir().join(format!("lsfs-sqlite-crash-{}.img", std::process::id()));
            std::fs::write(&keep, &image).unwrap();
            panic!("recovery failed: {e} (image kept in {})", keep.display());
        }
    };
    for name in names {
        let _ = std::fs::remove_file(dir.join(name));
        let Ok(a) = fs.lookup(ROOT_INO, name.as_bytes()) else {
            continue;
        };
        let bytes = fs.read(a.ino, 0, a.size as u32).unwrap();
        assert_eq!(bytes.len() as u64, a.size);
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

const ACCOUNTS: i64 = 10;
const TOTAL: i64 = ACCOUNTS * 1000;

/// Images a crash test checks at least: the workload goes on past its
/// transactions until the checker has taken them (on a busy machine each
/// takes long).
const MIN_IMAGES: u64 = 8;

/// Transfers between accounts, each with a counter and a log row: a
/// transaction applied in part breaks `sum = TOTAL` or `count(log) = n`.
/// At least `n`, and on until `images` reaches [`MIN_IMAGES`] (at most
/// 4 times `n`); `acked` counts those that returned.
fn transfers(path: &Path, mode: &str, n: u64, acked: &AtomicU64, images: &AtomicU64) {
    let db = Db::open(path).unwrap();
    db.exec(mode).unwrap();
    db.exec(&format!(
        "BEGIN; \
         CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER); \
         CREATE TABLE meta(n INTEGER); INSERT INTO meta VALUES(0); \
         CREATE TABLE log(n INTEGER, pad BLOB); \
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {ACCOUNTS}) \
         INSERT INTO acct SELECT i, 1000 FROM c; \
         COMMIT;"
    ))
    .unwrap();
    acked.store(0, Ordering::SeqCst);
    let mut x = 12345u64;
    for k in 1..=4 * n {
        if k > n && images.load(Ordering::SeqCst) >= MIN_IMAGES {
            break;
        }
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let a = (x >> 33) as i64 % ACCOUNTS + 1;
        let b = (x >> 17) as i64 % ACCOUNTS + 1;
        let d = (x >> 40) as i64 % 50;
        db.exec(&format!(
            "BEGIN; \
             UPDATE acct SET bal = bal - {d} WHERE id = {a}; \
             UPDATE acct SET bal = bal + {d} WHERE id = {b}; \
             UPDATE meta SET n = n + 1; \
             INSERT INTO log VALUES((SELECT n FROM meta), randomblob(700)); \
             COMMIT;"
        ))
        .unwrap();
        acked.store(k, Ordering::SeqCst);
    }
}

/// Check the recovered database in `dir`: whole, balanced, and with at
/// least `acked` transactions. Returns how many it holds.
fn check_recovered(dir: &Path, acked: u64) -> u64 {
    let db = Db::open(&dir.join("db")).unwrap();
    assert_eq!(db.query("PRAGMA integrity_check").unwrap(), "ok");
    let Ok(n) = db.query_i64("SELECT n FROM meta") else {
        // The tables were not committed yet.
        assert_eq!(
            acked, 0,
            "the tables of an acknowledged transaction are gone"
        );
        return 0;
    };
    assert_eq!(
        db.query_i64("SELECT sum(bal) FROM acct").unwrap(),
        TOTAL,
        "a transfer in part"
    );
    assert_eq!(
        db.query_i64("SELECT count(*) FROM log").unwrap(),
        n,
        "a log row without its count"
    );
    assert!(
        n as u64 >= acked,
        "{n} transactions after a crash, {acked} acknowledged"
    );
    n as u64
}

/// Device images taken while SQLite runs transfers (each a crash at that
/// moment, between two requests) recover to a whole database holding every
/// acknowledged transaction and none in part; the count never goes back.
fn crash_images_while_sqlite_runs(mode: &str, files: &[&str], n: u64, atomic_writes: bool) {
    if !fuse_available() {
        return;
    }
    // Room for every fsync record since the last checkpoint twice over:
    // recovery copies the records' data into the files and checkpoints,
    // and on a 32 MiB image a crash after some 1,200 WAL fsyncs without a
    // checkpoint left too little room for that (ENOSPC at mount).
    let m = Mounted::new(engine(128 << 20), atomic_writes);
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let path = m.root.join("db");
    let worker = {
        let (acked, done, taken) = (acked.clone(), done.clone(), taken.clone());
        let mode = mode.to_string();
        std::thread::spawn(move || {
            transfers(&path, &mode, n, &acked, &taken);
            done.store(true, Ordering::SeqCst);
        })
    };
    let out = tempfile::tempdir().unwrap();
    let (mut images, mut last) = (0, 0);
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(2));
        let before = acked.load(Ordering::SeqCst);
        let image = {
            let mut fs = m.vfs.lock().unwrap();
            // Every other image right after a checkpoint, as the timer or
            // cache pressure may write one at any moment: it must not
            // carry a transaction's writes before its commit.
            if images % 2 == 0 {
                fs.checkpoint().unwrap();
            }
            let image = fs.store.dev_bytes_for_test();
            if images % 2 == 1 {
                // Nothing here writes checkpoints on a timer: bound the
                // fsync records a recovery replays (see the image size).
                fs.checkpoint().unwrap();
            }
            image
        };
        files_after_crash(image, files, out.path());
        let n = check_recovered(out.path(), before);
        assert!(n >= last, "the count went back from {last} to {n}");
        last = n;
        images += 1;
        taken.store(images, Ordering::SeqCst);
    }
    worker.join().expect("the SQLite worker failed");
    let commits = m.vfs.lock().unwrap().atomic.stats.commits;
    let n = acked.load(Ordering::SeqCst);
    eprintln!("{mode}: {images} crash images checked, {n} transactions, {commits} atomic commits");
    assert!(images >= MIN_IMAGES, "too few images to mean anything");
    let batch = atomic_writes && !mode.contains("WAL");
    assert_eq!(commits >= n, batch, "atomic commits: {commits}");
    let image = m.vfs.lock().unwrap().store.dev_bytes_for_test();
    files_after_crash(image, files, out.path());
    assert_eq!(check_recovered(out.path(), n), n);
    m.unmount();
}

#[test]
fn batch_atomic_transactions_are_all_or_nothing_after_a_crash() {
    crash_images_while_sqlite_runs(
        "PRAGMA journal_mode=DELETE;",
        &["db", "db-journal"],
        400,
        true,
    );
}

/// SQLite's rollback journal on lsfs: the mount does not serve the
/// ioctls, so SQLite writes and syncs a journal for each transaction, and
/// a crash image may hold a hot journal, which SQLite rolls back. The
/// commit point is the journal's unlink, which only `synchronous=EXTRA`
/// makes durable (a directory fsync) before the commit returns: with FULL
/// a crash may roll back the last acknowledged transaction, on any file
/// system.
#[test]
fn rollback_journal_transactions_are_all_or_nothing_after_a_crash() {
    crash_images_while_sqlite_runs(
        "PRAGMA journal_mode=DELETE; PRAGMA synchronous=EXTRA;",
        &["db", "db-journal"],
        400,
        false,
    );
}

/// WAL mode uses no atomic writes (SQLite's WAL has its own commit), and
/// keeps the same promises on lsfs. Exclusive locking keeps the WAL index
/// in memory instead of a shared mapping of a file on the mount, which an
/// in-process server can deadlock on (`sqlite_commits_without_a_journal_on_lsfs`).
#[test]
fn wal_transactions_are_all_or_nothing_after_a_crash() {
    crash_images_while_sqlite_runs(
        "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
        &["db", "db-wal"],
        // Its commits are quicker (one append and fsync each).
        3000,
        true,
    );
}
