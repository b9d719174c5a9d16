//! What `df` reports (`statfs`) is what a user can write: it drops as
//! files are written, comes back as soon as they are removed (space that
//! only plain checkpoints in the protection period hold is given up before
//! ENOSPC, so it counts as available), and filling the file system writes
//! about as much as it said.

mod common;
use common::*;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Errno, Vfs, ROOT_INO};

const DEV_BYTES: u64 = 48 * MIB;
const CHUNK: usize = 64 * 1024;

fn avail_bytes(fs: &mut Lsfs) -> u64 {
    let s = fs.statfs().unwrap();
    assert!(s.bavail <= s.bfree && s.bfree <= s.blocks, "{s:?}");
    s.bavail * s.frsize as u64
}

/// Writes file `name` in CHUNK pieces until `bytes` or ENOSPC; the bytes written.
fn write_file(fs: &mut Lsfs, name: &str, bytes: u64, seed: u64) -> (u64, Option<Errno>) {
    let a = match fs.mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx()) {
        Ok(a) => a,
        Err(e) => return (0, Some(e)),
    };
    fs.forget(a.ino, 1);
    let mut off = 0;
    while off < bytes {
        match fs.write(a.ino, off, &pattern(seed + off, CHUNK)) {
            Ok(n) => off += n as u64,
            Err(e) => return (off, Some(e)),
        }
    }
    (off, None)
}

#[test]
fn df_drops_after_rm_and_says_what_can_be_written() {
    // Defaults, protection included: every plain checkpoint of the last hour is kept
    // while nothing presses for space.
    let mut fs = mkfs(DEV_BYTES, MountConfig::default());
    let empty = avail_bytes(&mut fs);
    assert!(
        empty > DEV_BYTES / 2,
        "an empty 48 MiB image offers only {empty} bytes"
    );

    // Half of it in eight files.
    let each = empty / 2 / 8 / CHUNK as u64 * CHUNK as u64;
    for i in 0..8 {
        let (n, err) = write_file(&mut fs, &format!("f{i}"), each, i * 1_000_000);
        assert_eq!((n, err), (each, None));
    }
    fs.sync().unwrap();
    let half = avail_bytes(&mut fs);
    let dropped = empty - half;
    assert!(
        dropped.abs_diff(8 * each) < 8 * each / 10,
        "writing {} bytes took {dropped} from df",
        8 * each
    );

    // rm: the files are freed in the background, so df does not come back
    // at the unlink; it does once their blocks are freed, though the
    // checkpoints of the last hour still hold them.
    for i in 0..8 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert!(fs.reclaim_status().blocks > 0);
    assert!(
        avail_bytes(&mut fs) < half + 4 * 4096,
        "df counts blocks not freed yet as free"
    );
    fs.reclaim_all().unwrap();
    fs.sync().unwrap();
    let after_rm = avail_bytes(&mut fs);
    assert!(
        after_rm + empty / 50 >= empty,
        "df after rm: {after_rm} bytes available, {empty} before anything was written"
    );

    // And what df says can be written, can be.
    let (written, err) = write_file(&mut fs, "big", u64::MAX, 7);
    assert_eq!(err, Some(Errno::NOSPC));
    assert!(
        written >= after_rm - after_rm / 10,
        "df said {after_rm} bytes were available; only {written} could be written"
    );
    let full = avail_bytes(&mut fs);
    assert!(
        full < empty / 20,
        "df says {full} bytes are still available after ENOSPC"
    );
    fs.sync().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after filling");
}

#[test]
fn df_does_not_count_what_snapshots_hold() {
    let mut fs = mkfs(DEV_BYTES, MountConfig::default());
    let empty = avail_bytes(&mut fs);
    let bytes = empty / 4 / CHUNK as u64 * CHUNK as u64;
    assert_eq!(write_file(&mut fs, "kept", bytes, 1), (bytes, None));
    fs.sync().unwrap();
    let cno = fs.snapshot_create().unwrap();
    fs.unlink(ROOT_INO, b"kept").unwrap();
    fs.reclaim_all().unwrap();
    fs.sync().unwrap();
    let held = avail_bytes(&mut fs);
    assert!(
        held + bytes <= empty + empty / 50,
        "a snapshot holds {bytes} bytes, yet df offers {held} of {empty}"
    );
    // Dropping the snapshot gives them back once its blocks are counted
    // again (a slice per tick in the background; all at once here).
    fs.snapshot_set(cno, false).unwrap();
    fs.reconcile_all().unwrap();
    let back = avail_bytes(&mut fs);
    assert!(
        back + empty / 50 >= empty,
        "after the snapshot was dropped df offers {back} of {empty}"
    );
}
