//! `sqlite-tx`: small SQLite transactions, one at a time, in a journal mode,
//! on whatever file system holds the database: the workload of
//! `scripts/sqlite-bench.sh`, which counts what the device did around it.
//!
//! SQLite is the bundled one, built with `SQLITE_ENABLE_BATCH_ATOMIC_WRITE`:
//! in `delete` mode it commits without a journal where the file system
//! answers F2FS's atomic-write ioctls (lsfs), and with its rollback journal
//! elsewhere; the output says which it did.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use lsfs_sqlite_tests::{small_transaction, Db, SMALL_TRANSACTION_TABLE};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// `journal_mode=DELETE`, `synchronous=FULL` (SQLite's default): a
    /// rollback journal, or batch atomic writes where the file system has
    /// them.
    Delete,
    /// `journal_mode=WAL`, `synchronous=FULL`: every commit appended to the
    /// write-ahead log and made durable.
    Wal,
}

impl Mode {
    fn pragmas(self) -> &'static str {
        match self {
            Mode::Delete => "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;",
            Mode::Wal => "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
        }
    }
}

/// Run small SQLite transactions (an insert of 3,000 bytes and an update of
/// another row each) and report transactions per second.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The database file to create; it must not exist.
    #[arg(long)]
    db: PathBuf,
    /// The journal mode.
    #[arg(long, value_enum, default_value = "delete")]
    mode: Mode,
    /// Transactions to run (1..=10000000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    transactions: u64,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("sqlite-tx: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.db.exists() {
        return Err(format!("--db {}: already exists", args.db.display()));
    }
    let db = Db::open(&args.db)?;
    db.exec(args.mode.pragmas())?;
    db.exec(SMALL_TRANSACTION_TABLE)?;
    let t0 = Instant::now();
    for i in 0..args.transactions {
        small_transaction(&db, i)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let rows = db.query_i64("SELECT count(*) FROM t")?;
    if rows != args.transactions as i64 {
        return Err(format!(
            "{rows} rows after {} transactions",
            args.transactions
        ));
    }
    let batch = db.batch_atomic();
    let tps = args.transactions as f64 / secs;
    if args.json {
        println!(
            "{{\"mode\": \"{:?}\", \"transactions\": {}, \"seconds\": {secs:.4}, \
             \"tx_per_sec\": {tps:.1}, \"batch_atomic\": {batch}}}",
            args.mode, args.transactions
        );
    } else {
        println!(
            "{:?}: {} transactions in {secs:.3} s, {tps:.0}/s, batch atomic writes {}",
            args.mode,
            args.transactions,
            if batch { "used" } else { "not available" }
        );
    }
    Ok(())
}
