//! Group commit through a real mount: four processes' threads fsyncing at
//! once share device flushes, with the mount's default single FUSE thread
//! (fsyncs run on the adapter's workers, `lsfs-fuse/src/fsync_workers.rs`).
//! Served one at a time on the FUSE thread, every fsync cost a flush of
//! its own and none was shared.

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
    // On the host's disk, not a tmpfs: a flush must take long enough for
    // other fsyncs to arrive while it runs, as on any real device.
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &[]);
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
    assert!(
        shared > 0 && flushes < fsyncs,
        "{fsyncs} fsyncs from {THREADS} threads cost {flushes} device flushes, {shared} shared: no group commit"
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
    m.unmount();
    mounted::fsck_clean(&image, "after concurrent fsyncs");
}
