//! Read-only mounts beside the writer. A reader shows the checkpoint that
//! was newest when it mounted; once the writer gives that checkpoint up
//! (at once here: `protection_secs = 0`) and writes its segments again,
//! the reader's reads of them fail with EIO, naming the segment, instead
//! of returning the writer's newer blocks, or zeros, as the reader's file.
//! A snapshot is never given up, so a reader of one keeps reading it,
//! following the DAT when the writer's cleaner moves its blocks; a reader
//! of a plain checkpoint follows too, until the writer gives it up.
//! And threaded logging, which would write segments again without the
//! first record that tells readers so, is refused on an object store.

mod common;

use common::*;
use lsfs_core::device::BlockDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_object::{ObjectDevice, Target};
use lsfs_vfs::{Vfs, ROOT_INO};
use object_store::memory::InMemory;
use std::sync::Arc;

const FILE_BYTES: usize = 2 << 20;

fn reader(t: &Target, checkpoint: Option<u64>) -> Lsfs {
    let mut c = MountConfig::default();
    c.store.read_only = true;
    c.checkpoint = checkpoint;
    let dev = ObjectDevice::open(t, false, 8 << 20).unwrap();
    Lsfs::open(Box::new(dev), c).unwrap()
}

#[test]
fn a_reader_whose_checkpoint_the_writer_reused_gets_eio_not_other_data() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/readers");
    let mut cfg = MountConfig::default();
    cfg.store.protection_secs = 0;
    let mut w = mkfs_writer(&t, "readers", cfg);
    let a = new_file(&mut w, b"a");
    let old = data(1, FILE_BYTES);
    w.write(a, 0, &old).unwrap();
    w.checkpoint().unwrap();

    // Mounted now, and reading at once: the view's own segments pass.
    let mut fresh = reader(&t, None);
    assert!(fresh.read(a, 0, FILE_BYTES as u32).unwrap() == old);
    // Mounted now, reading only after the writer went on.
    let mut late = reader(&t, None);
    // The same, of the checkpoint by its number: it follows the writer's
    // moves, but the writer gives the checkpoint up.
    let plain = w.checkpoint().unwrap();
    let mut of_plain = reader(&t, Some(plain));
    // A snapshot of newer contents, and a reader of it.
    let kept = data(2, FILE_BYTES);
    w.write(a, 0, &kept).unwrap();
    let snap = w.snapshot_create().unwrap();
    let mut of_snapshot = reader(&t, Some(snap));

    // The writer rewrites the file many times over the 24 MiB device: the
    // plain checkpoints the first two readers show are given up and their
    // segments written again.
    for round in 0..20u8 {
        w.write(a, 0, &data(round + 3, FILE_BYTES)).unwrap();
        w.checkpoint().unwrap();
    }

    match late.read(a, 0, FILE_BYTES as u32) {
        Ok(d) => panic!(
            "the late reader read {} (its own contents: {})",
            if d == old {
                "its own contents"
            } else {
                "other data"
            },
            d == old
        ),
        Err(e) => assert_eq!(e.0, libc::EIO, "the late reader's read"),
    }
    let e = of_plain.read(a, 0, FILE_BYTES as u32).unwrap_err();
    assert_eq!(e.0, libc::EIO, "the plain checkpoint's reader");
    // The reader that had read the file keeps what it holds in memory, or
    // fails the same way; it never reads the writer's blocks as its own.
    if let Ok(d) = fresh.read(a, 0, FILE_BYTES as u32) {
        assert!(d == old, "the fresh reader read other data");
    }
    assert!(
        of_snapshot.read(a, 0, FILE_BYTES as u32).unwrap() == kept,
        "a snapshot's reader"
    );
    w.unmount().unwrap();
}

/// What the refusal says: the segment, its object, and what to do.
#[test]
fn a_segment_written_after_the_view_is_refused_naming_it() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/view");
    let mut w = mkfs_writer(&t, "view", MountConfig::default());
    let fs_id = w.store.superblock().fs_id;
    w.unmount().unwrap();
    drop(w);
    let dev = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    let mut b = vec![0; 4096];
    // A view older than everything written: the first segment's records
    // are all newer. Segment 0 starts at block 1.
    dev.fix_view(fs_id, 0);
    let e = dev.read_at(4096, &mut b).unwrap_err().to_string();
    assert!(
        e.contains("segment 0") && e.contains("fs/view/seg/0") && e.contains("mount again"),
        "{e}"
    );
    // A segment never written (or deleted by the writer) is refused too.
    let last = geo().nsegments() - 1;
    let e = dev
        .read_at((1 + last * SEG_BLOCKS) * 4096, &mut b)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("segment {last}")) && e.contains("freed"),
        "{e}"
    );
    // Without a fixed view (the writer, fsck, an open before it mounts)
    // the same reads are served.
    let dev = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    dev.read_at(4096, &mut b).unwrap();
    dev.read_at((1 + last * SEG_BLOCKS) * 4096, &mut b).unwrap();
}

/// Threaded logging fills holes in segments written earlier: on an object
/// store each hole would upload its whole segment again, and a reader
/// could not tell the segment was written again (its first record stays).
/// So it is refused there, naming the setting, at mkfs, at a read-write
/// mount and when switched at run time; a read-only mount ignores it.
#[test]
fn threaded_logging_is_refused_on_an_object_store() {
    use lsfs_core::gc::ThreadedLogging;
    let t = Target::on(Arc::new(InMemory::new()), "fs/threaded");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let opts = MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: "threaded".into(),
    };
    let writer = || Box::new(ObjectDevice::open(&t, true, 8 << 20).unwrap());
    let mut threaded = MountConfig::default();
    threaded.cleaner.threaded_logging = ThreadedLogging::Adaptive;
    let refused = |e: String| {
        assert!(
            e.contains("threaded_logging = \"adaptive\"") && e.contains("object store"),
            "{e}"
        )
    };
    refused(
        Lsfs::mkfs(writer(), &opts, threaded.clone())
            .err()
            .unwrap()
            .to_string(),
    );
    let mut fs = Lsfs::mkfs(writer(), &opts, MountConfig::default()).unwrap();
    refused(fs.set_threaded_logging("adaptive").unwrap_err());
    fs.set_threaded_logging("off").unwrap();
    fs.unmount().unwrap();
    drop(fs);
    refused(
        Lsfs::open(writer(), threaded.clone())
            .err()
            .unwrap()
            .to_string(),
    );
    threaded.store.read_only = true;
    let dev = ObjectDevice::open(&t, false, 8 << 20).unwrap();
    Lsfs::open(Box::new(dev), threaded).unwrap();
}

/// A snapshot's blocks are live, but the cleaner still moves them: the
/// segments that hold them also hold blocks that died. The writer then
/// changes only the DAT, which every checkpoint shares, and may write the
/// old segments again. A reader of the snapshot, mounted before the move,
/// follows the writer's newer DAT and keeps reading the snapshot.
#[test]
fn a_snapshot_reader_follows_blocks_the_cleaner_moved() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/moved");
    let mut cfg = MountConfig::default();
    cfg.store.protection_secs = 0;
    let mut w = mkfs_writer(&t, "moved", cfg);
    let mk = |w: &mut Lsfs, name: &[u8]| {
        w.mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap()
            .ino
    };
    let (a, b) = (mk(&mut w, b"a"), mk(&mut w, b"b"));
    // a and b interleaved, 16 KiB at a time, so that every segment
    // holding a also holds b.
    let kept = data(7, FILE_BYTES);
    let chunk = 16 << 10;
    for off in (0..FILE_BYTES).step_by(chunk) {
        w.write(a, off as u64, &kept[off..off + chunk]).unwrap();
        w.write(b, off as u64, &data(8, chunk)).unwrap();
        w.fsync(a, true).unwrap();
        w.fsync(b, true).unwrap();
    }
    w.unlink(ROOT_INO, b"b").unwrap();
    let snap = w.snapshot_create().unwrap();
    let mut of_snapshot = reader(&t, Some(snap));

    // The writer fills the device over and over with another file: the
    // cleaner moves a's blocks out of the half-dead segments and reuses
    // them.
    w.checkpoint().unwrap();
    let pass = w.clean(64, "test").unwrap();
    assert!(pass.blocks_copied > 0, "the pass copied nothing: {pass:?}");
    let c = mk(&mut w, b"c");
    for round in 0..20u8 {
        w.write(c, 0, &data(round + 9, FILE_BYTES)).unwrap();
        w.checkpoint().unwrap();
    }
    assert!(
        of_snapshot.read(a, 0, FILE_BYTES as u32).unwrap() == kept,
        "the snapshot's reader"
    );
    assert!(of_snapshot.view_follows() > 0, "the reader never followed");
    w.unmount().unwrap();
}

/// A reader going through a file in order fetches the next segments ahead
/// (`ObjectDevice::set_readahead`), and reads the same bytes as without.
#[test]
fn a_reader_in_order_fetches_segments_ahead() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/ahead");
    let mut w = mkfs_writer(&t, "ahead", MountConfig::default());
    let a = new_file(&mut w, b"a");
    let want = data(3, 4 * FILE_BYTES);
    w.write(a, 0, &want).unwrap();
    w.unmount().unwrap();
    drop(w);
    for ahead in [0, 4] {
        let dev = ObjectDevice::open(&t, false, 8 << 20).unwrap();
        dev.set_readahead(ahead);
        let stats = dev.stats_handle();
        let mut c = MountConfig::default();
        c.store.read_only = true;
        let mut r = Lsfs::open(Box::new(dev), c).unwrap();
        let mut got = Vec::new();
        while got.len() < want.len() {
            got.extend(r.read(a, got.len() as u64, 128 << 10).unwrap());
        }
        assert!(got == want, "read ahead {ahead}: other bytes");
        let n = stats
            .readahead_gets
            .load(std::sync::atomic::Ordering::Relaxed);
        if ahead == 0 {
            assert_eq!(n, 0);
        } else {
            assert!(n >= 8, "{n} segments fetched ahead of 32");
        }
    }
}

/// A file system made again in the store under a reader: the new one's
/// segments are refused (EIO), never read as the reader's, and the reader
/// does not follow into the new file system.
#[test]
fn a_reader_refuses_segments_of_a_file_system_made_again() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/again");
    let mut w = mkfs_writer(&t, "again", MountConfig::default());
    let a = new_file(&mut w, b"a");
    let old = data(1, FILE_BYTES);
    w.write(a, 0, &old).unwrap();
    let snap = w.snapshot_create().unwrap();
    w.unmount().unwrap();
    drop(w);
    let mut r = reader(&t, Some(snap));

    // Made again (mkfs --force), with the same names and numbers.
    ObjectDevice::create(&t, geo(), true).unwrap();
    let mut w = mkfs_writer_over(&t, "again");
    // Files of its own over the whole device, so that it writes every
    // segment the reader's file lay in.
    for n in 0..10u8 {
        let f = new_file(&mut w, format!("f{n}").as_bytes());
        w.write(f, 0, &data(n + 2, FILE_BYTES)).unwrap();
        w.checkpoint().unwrap();
    }
    let mut refused = 0;
    for blk in 0..(FILE_BYTES / 4096) as u64 {
        match r.read(a, blk * 4096, 4096) {
            Ok(d) => assert!(
                d[..] == old[blk as usize * 4096..][..4096],
                "block {blk}: the reader read the new file system's data"
            ),
            Err(e) => {
                assert_eq!(e.0, libc::EIO);
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "nothing of the old file system was refused");
    assert_eq!(r.view_follows(), 0, "followed into another file system");
    w.unmount().unwrap();
}

/// A reader of checkpoint N moves on to the writer's newer checkpoint M
/// (`Lsfs::move_view`, with the store opened again outside any lock by
/// `Reopened::open`): it then reads M's contents, a file removed before M is
/// unlinked, an inode the kernel held keeps its references, and the inodes to
/// invalidate are named (the root among them). A live mount cannot move.
#[test]
fn a_reader_moves_on_to_a_newer_checkpoint() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/moves");
    let mut w = mkfs_writer(&t, "moves", MountConfig::default());
    let a = new_file(&mut w, b"a");
    let b = new_file(&mut w, b"b");
    let (old, new) = (data(7, FILE_BYTES), data(8, FILE_BYTES));
    w.write(a, 0, &old).unwrap();
    let n = w.checkpoint().unwrap();
    let mut r = reader(&t, Some(n));
    assert!(r.read(a, 0, FILE_BYTES as u32).unwrap() == old);
    // The kernel holds `a` (looked up twice) and `b`.
    for name in [&b"a"[..], b"a", b"b"] {
        r.lookup(ROOT_INO, name).unwrap();
    }
    w.write(a, 0, &new).unwrap();
    w.unlink(ROOT_INO, b"b").unwrap();
    let m = w.checkpoint().unwrap();

    let dev = r
        .reopen_for_view()
        .expect("a view beside a writer")
        .unwrap();
    let opened = lsfs_core::fs::Reopened::open(dev, r.config.store.clone()).unwrap();
    assert!(opened.newest_checkpoint() >= m);
    let mut stale = r.move_view(opened, m).unwrap();
    stale.sort();
    assert_eq!(stale, vec![ROOT_INO, a, b], "the inodes the kernel holds");
    assert_eq!(r.shown_checkpoint(), Some(m));
    assert_eq!(r.view_moves(), 1);
    assert!(r.read(a, 0, FILE_BYTES as u32).unwrap() == new);
    assert_eq!(r.lookup(ROOT_INO, b"b").unwrap_err().0, libc::ENOENT);
    // Unlinked in M, its inode not yet reclaimed there: as a file removed
    // while open.
    assert_eq!(r.getattr(b).map_or(0, |a| a.nlink), 0, "b is unlinked in M");
    // The kernel's references to `a` survived the move: two forgets
    // are what it owes (more would be a miscount the engine warns of).
    r.forget(a, 2);
    r.forget(b, 1);

    // The writer's own mount shows no checkpoint and cannot move.
    assert!(w.reopen_for_view().is_none());
    let dev = r.reopen_for_view().unwrap().unwrap();
    let opened = lsfs_core::fs::Reopened::open(dev, r.config.store.clone()).unwrap();
    assert!(w.move_view(opened, m).is_err(), "a live mount moved");
}
