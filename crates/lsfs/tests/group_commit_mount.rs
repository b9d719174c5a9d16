//! Group commit through a real mount: four threads fsyncing at once share
//! device flushes, with the mount's default single FUSE thread and through
//! the io_uring queues (fsyncs run on the mount's workers,
//! `lsfs-fuse/src/fsync_workers.rs`). Served one at a time on the FUSE
//! thread, or on a ring queue's, every fsync cost a flush of its own and
//! few or none were shared.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

const THREADS: usize = 4;
const FSYNCS_EACH: usize = 200;

fn counter(s: &serde_json::Value, group: &str, name: &str) -> u64 {
    s[group][name].as_u64().unwrap_or(0)
}

#[test]
fn concurrent_fsyncs_share_flushes() {
    if !common::fuse_available() {
        return;
    }
    fsyncs_share_flushes(&[]);
}

/// The ring serves a request on the queue thread of the caller's CPU; an
/// fsync served there in place held that queue for its flush, and four
/// threads' fsyncs shared about one flush in twenty.
#[test]
fn concurrent_fsyncs_share_flushes_through_the_ring() {
    if !common::fuse_available() {
        return;
    }
    let ring = fsyncs_share_flushes(&["--uring", "on"]);
    assert!(
        ring >= (THREADS * FSYNCS_EACH) as u64,
        "only {ring} requests came through io_uring"
    );
}

/// Four threads write and fsync at once on a mount made with `args`; the
/// fsyncs must share flushes by at least a quarter, and every thread's
/// last write must be there. Returns how many requests came through
/// io_uring meanwhile.
fn fsyncs_share_flushes(args: &[&str]) -> u64 {
    // On the host's disk, not a tmpfs: a flush must take long enough for
    // other fsyncs to arrive while it runs, as on any real device.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", args);
    let before = mounted::lsfs_json("stats", &m.mnt);

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let path = m.mnt.join(format!("f{t}"));
            s.spawn(move || {
                let f = OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                for i in 0..FSYNCS_EACH {
                    let block = [(i % 251) as u8 ^ t as u8; 4096];
                    f.write_all_at(&block, (i as u64 % 64) * 4096).unwrap();
                    f.sync_data().unwrap();
                }
            });
        }
    });

    let after = mounted::lsfs_json("stats", &m.mnt);
    let d = |group: &str, name: &str| counter(&after, group, name) - counter(&before, group, name);
    let fsyncs = d("io", "fsync_flushes");
    let shared = d("io", "fsync_flushes_shared");
    let flushes = d("device", "flushes");
    assert!(
        fsyncs >= (THREADS * FSYNCS_EACH) as u64,
        "the engine saw {fsyncs} fsyncs for {} made",
        THREADS * FSYNCS_EACH
    );
    eprintln!("{args:?}: {fsyncs} fsyncs, {flushes} flushes, {shared} shared");
    assert!(
        shared > 0 && flushes * 4 <= fsyncs * 3,
        "{fsyncs} fsyncs from {THREADS} threads cost {flushes} device flushes, {shared} shared: too little group commit"
    );

    // Every thread's last write is there.
    for t in 0..THREADS {
        let data = fs::read(m.mnt.join(format!("f{t}"))).unwrap();
        let i = FSYNCS_EACH - 1;
        let at = (i % 64) * 4096;
        assert!(data[at..at + 4096]
            .iter()
            .all(|&b| b == (i % 251) as u8 ^ t as u8));
    }
    let ring = d("fuse", "through_io_uring");
    m.unmount();
    mounted::fsck_clean(&image, "after concurrent fsyncs");
    ring
}
