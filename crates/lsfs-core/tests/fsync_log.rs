//! fsync records with inline items (docs/FORMAT.md §3.1, docs/CRASH.md):
//! what one fsync costs (records, blocks, flushes; never a checkpoint for
//! a namespace change), what a crash right after it keeps, the operation
//! log's bounds, and images written before inline items (no feature bit,
//! inode images in payload blocks), which still mount and roll forward.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::oplog;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::layout::BLOCK_BYTES;
use lsfs_core::log::chain::segment_records;
use lsfs_core::log::items::{self, Item};
use lsfs_core::log::record::{summary_blocks, BlockKind, RecordHeader, SummaryEntry, FLAG_DSYNC};
use lsfs_core::log::superblock::{
    Superblock, FEATURE_INCOMPAT_INLINE_ITEMS, FEATURE_INCOMPAT_MOVE_RECORDS,
};
use lsfs_vfs::{FileKind, Ino, SetAttr, Vfs, RENAME_EXCHANGE, ROOT_INO};
use std::collections::BTreeMap;

const DEV_BYTES: u64 = 64 * MIB;

/// Device flushes, records, blocks written and checkpoints so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    flushes: u64,
    records: u64,
    blocks: u64,
    checkpoints: u64,
}

fn counts(fs: &Lsfs) -> Counts {
    Counts {
        flushes: fs.store.device_counters().flushes,
        records: fs.store.stats().records_written,
        blocks: fs.store.stats().blocks_written,
        checkpoints: fs.store.stats().checkpoints_written,
    }
}

/// What `f` wrote: (flushes, records, blocks, checkpoints).
fn cost(fs: &mut Lsfs, f: impl FnOnce(&mut Lsfs)) -> (u64, u64, u64, u64) {
    let a = counts(fs);
    f(fs);
    let b = counts(fs);
    (
        b.flushes - a.flushes,
        b.records - a.records,
        b.blocks - a.blocks,
        b.checkpoints - a.checkpoints,
    )
}

fn create(fs: &mut Lsfs, dir: Ino, name: &str) -> Ino {
    let a = fs
        .mknod(dir, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap();
    fs.forget(a.ino, 1);
    a.ino
}

fn lookup(fs: &mut dyn Vfs, dir: Ino, name: &str) -> Option<Ino> {
    let a = fs.lookup(dir, name.as_bytes()).ok()?;
    fs.forget(a.ino, 1);
    Some(a.ino)
}

/// Every path with its kind, link count, size, contents and xattrs.
fn dump(fs: &mut dyn Vfs) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(ROOT_INO, String::new())];
    while let Some((d, prefix)) = todo.pop() {
        for ent in fs.readdir(d, 0, usize::MAX).unwrap() {
            if ent.name == b"." || ent.name == b".." {
                continue;
            }
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&ent.name));
            let a = fs.getattr(ent.ino).unwrap();
            let data = match a.kind {
                FileKind::File => fs.read(ent.ino, 0, 1 << 20).unwrap(),
                FileKind::Symlink => fs.readlink(ent.ino).unwrap(),
                _ => Vec::new(),
            };
            let mut xattrs = Vec::new();
            for n in fs.listxattr(ent.ino).unwrap() {
                let v = fs.getxattr(ent.ino, &n).unwrap();
                xattrs.push((n, v));
            }
            let size = if a.kind == FileKind::Dir { 0 } else { a.size };
            out.insert(
                path.clone(),
                format!(
                    "{:?} nlink {} size {size} perm {:o} mtime {:?} data {:x} xattrs {xattrs:?}",
                    a.kind,
                    a.nlink,
                    a.perm,
                    a.mtime,
                    fnv(&data)
                ),
            );
            if a.kind == FileKind::Dir {
                todo.push((ent.ino, path));
            }
        }
    }
    out
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

fn recover(img: Vec<u8>) -> Lsfs {
    assert_clean(&fsck_bytes(img.clone()), "crash image");
    Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).expect("recovery")
}

/// The promise of docs/CRASH.md §4, measured: creating a file, writing
/// 4 KiB and fsyncing it writes one record of two blocks and one flush,
/// and no checkpoint; 32 blocks take 33. Every namespace or metadata
/// change followed by an fsync (of the file or of its directory) costs
/// the same one record and one flush, and a crash right after each fsync
/// keeps exactly what the file system held then.
#[test]
fn an_fsync_after_any_change_is_one_record_and_one_flush() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &ctx()).unwrap().ino;
    fs.sync().unwrap();

    // create + write + fsync.
    let mut f = 0;
    let c = cost(&mut fs, |fs| {
        f = create(fs, d, "new");
        fs.write(f, 0, &pattern(1, 4096)).unwrap();
    });
    assert_eq!(c, (0, 0, 0, 0), "create and write wrote something");
    let c = cost(&mut fs, |fs| fs.fsync(f, false).unwrap());
    assert_eq!(
        c,
        (1, 1, 2, 0),
        "create+write 4 KiB+fsync: (flushes, records, blocks, checkpoints)"
    );
    let c = cost(&mut fs, |fs| {
        let g = create(fs, d, "big");
        fs.write(g, 0, &pattern(2, 32 * 4096)).unwrap();
        fs.fsync(g, true).unwrap();
    });
    assert_eq!(
        c,
        (1, 1, 33, 0),
        "a 32-block file: its blocks and one header"
    );

    // Each change, then fsync of what it touched or of a directory.
    type Step = Box<dyn Fn(&mut Lsfs, Ino) -> Ino>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "rename, fsync the file",
            Box::new(|fs, d| {
                fs.rename(d, b"new", ROOT_INO, b"moved", 0).unwrap();
                lookup(fs, ROOT_INO, "moved").unwrap()
            }),
        ),
        (
            "rename, fsync the directory",
            Box::new(|fs, d| {
                fs.rename(ROOT_INO, b"moved", d, b"back", 0).unwrap();
                d
            }),
        ),
        (
            "link",
            Box::new(|fs, d| {
                let f = lookup(fs, d, "back").unwrap();
                fs.link(f, ROOT_INO, b"hard").unwrap();
                fs.forget(f, 1);
                f
            }),
        ),
        (
            "unlink, fsync the directory",
            Box::new(|fs, _| {
                fs.unlink(ROOT_INO, b"hard").unwrap();
                ROOT_INO
            }),
        ),
        (
            "mkdir",
            Box::new(|fs, d| {
                let e = fs.mkdir(d, b"sub", 0o700, &ctx()).unwrap().ino;
                fs.forget(e, 1);
                e
            }),
        ),
        (
            "symlink",
            Box::new(|fs, d| {
                let l = fs.symlink(d, b"l", &[b'y'; 1000], &ctx()).unwrap().ino;
                fs.forget(l, 1);
                l
            }),
        ),
        (
            "fifo",
            Box::new(|fs, d| {
                let p = fs
                    .mknod(d, b"p", libc::S_IFIFO | 0o600, 0, &ctx())
                    .unwrap()
                    .ino;
                fs.forget(p, 1);
                d
            }),
        ),
        (
            "rmdir",
            Box::new(|fs, d| {
                fs.rmdir(d, b"sub").unwrap();
                d
            }),
        ),
        (
            "setxattr",
            Box::new(|fs, d| {
                let f = lookup(fs, d, "back").unwrap();
                fs.setxattr(f, b"user.a", &pattern(3, 2000), 0).unwrap();
                fs.setxattr(f, b"user.b", b"b", 0).unwrap();
                f
            }),
        ),
        (
            "removexattr",
            Box::new(|fs, d| {
                let f = lookup(fs, d, "back").unwrap();
                fs.removexattr(f, b"user.b").unwrap();
                f
            }),
        ),
        (
            "shrink and write",
            Box::new(|fs, d| {
                let f = lookup(fs, d, "big").unwrap();
                let set = SetAttr {
                    size: Some(10_000),
                    ..SetAttr::default()
                };
                fs.setattr(f, &set).unwrap();
                fs.write(f, 20_000, b"tail").unwrap();
                f
            }),
        ),
        (
            "exchange",
            Box::new(|fs, d| {
                fs.rename(d, b"back", d, b"big", RENAME_EXCHANGE).unwrap();
                d
            }),
        ),
        (
            "rename over, fsync an unrelated file",
            Box::new(|fs, d| {
                fs.rename(d, b"big", d, b"back", 0).unwrap();
                create(fs, ROOT_INO, "other")
            }),
        ),
    ];
    for (what, step) in steps {
        let target = step(&mut fs, d);
        let c = cost(&mut fs, |fs| fs.fsync(target, false).unwrap());
        assert_eq!(
            (c.0, c.1, c.3),
            (1, 1, 0),
            "{what}: (flushes, records, checkpoints)"
        );
        // A crash now: everything is as it was, the namespace included.
        let want = dump(&mut fs);
        let mut back = recover(image(&mut fs));
        assert!(back.replayed_records > 0, "{what}: nothing rolled forward");
        assert_eq!(dump(&mut back), want, "{what}: after a crash");
    }
    assert_eq!(
        fs.store.stats().checkpoints_by_cause.get("fsync"),
        None,
        "an fsync wrote a checkpoint"
    );
    assert!(fs.store.stats().dsync_ops_written >= 15);
}

/// Operations are logged across fsyncs of other files: each record
/// carries only the operations since the one before, and recovery replays
/// them all, in order, then the data.
#[test]
fn records_carry_the_operations_since_the_one_before() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let a = create(&mut fs, ROOT_INO, "a");
    fs.write(a, 0, &pattern(1, 9000)).unwrap();
    fs.fsync(a, false).unwrap();
    assert!(fs.oplog.pending().is_empty());
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", 0).unwrap();
    let c = create(&mut fs, ROOT_INO, "c");
    assert_eq!(fs.oplog.pending().len(), 2);
    fs.fsync(c, false).unwrap();
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.write(c, 0, b"c's data").unwrap();
    fs.fsync(c, false).unwrap();
    assert_eq!(fs.oplog.ops_since_checkpoint(), 4);
    let img = image(&mut fs);
    // The last record holds the unlink, and images of c and the root only.
    let (geo, fs_id) = (fs.store.geo(), fs.store.superblock().fs_id);
    let recs = segment_records(
        &mut MemDevice::from_bytes(img.clone()),
        &geo,
        fs_id,
        fs.store.log_head().0,
    )
    .unwrap();
    let last = recs.last().unwrap();
    assert!(last.header.flags & FLAG_DSYNC != 0);
    let got = items::decode(&last.header.inline, "last record").unwrap();
    let ops: Vec<_> = got.iter().filter(|i| i.is_operation()).collect();
    assert_eq!(
        ops,
        vec![&Item::Unlink {
            parent: ROOT_INO,
            name: b"b".to_vec()
        }]
    );
    let imaged: Vec<u64> = got
        .iter()
        .filter_map(|i| match i {
            Item::Inode { ino, .. } => Some(*ino),
            _ => None,
        })
        .collect();
    assert_eq!(imaged, vec![ROOT_INO, c], "the deleted file has no image");
    let mut back = recover(img);
    assert_eq!(back.replayed_records, 3);
    assert_eq!(dump(&mut back), dump(&mut fs));
    assert!(lookup(&mut back, ROOT_INO, "b").is_none());
}

/// Past its bounds the operation log makes the writer checkpoint, and an
/// fsync whose items do not fit one record writes a checkpoint (still one
/// flush) instead; many changes without an fsync cost no checkpoint.
#[test]
fn the_operation_log_is_bounded() {
    // A cache large enough that no checkpoint comes from dirty blocks.
    let mut fs = mkfs(DEV_BYTES, MountConfig::default());
    let by = |fs: &Lsfs, c| fs.store.stats().checkpoints_by_cause.get(c).copied();
    let c = cost(&mut fs, |fs| {
        for i in 0..2000 {
            create(fs, ROOT_INO, &format!("n{i}"));
        }
    });
    assert_eq!(c, (0, 0, 0, 0), "2,000 creates wrote something");
    // The first fsync falls back (2,200 pending creates), then 4,096 more.
    for i in 0..oplog::MAX_OPS + 300 {
        let f = create(&mut fs, ROOT_INO, &format!("f{i}"));
        assert!(fs.oplog.ops_since_checkpoint() <= oplog::MAX_OPS);
        if i % 200 == 199 {
            fs.fsync(f, false).unwrap();
        }
    }
    assert_eq!(
        by(&fs, "oplog"),
        Some(1),
        "4,096 operations since the checkpoint"
    );
    assert_eq!(
        by(&fs, "fsync"),
        Some(1),
        "2,000 creates are not one record"
    );
    // Bytes: 16 xattrs of 64 KiB make over 1 MiB.
    let f = lookup(&mut fs, ROOT_INO, "f0").unwrap();
    fs.sync().unwrap();
    for i in 0..15u64 {
        let name = format!("user.big{i}");
        fs.setxattr(f, name.as_bytes(), &pattern(i, 65536), 0)
            .unwrap();
    }
    assert_eq!(by(&fs, "oplog"), Some(1));
    fs.setxattr(f, b"user.big15", &pattern(5, 65536), 0)
        .unwrap();
    assert_eq!(by(&fs, "oplog"), Some(2), "over 1 MiB of operations");
    assert_eq!(fs.oplog.ops_since_checkpoint(), 0);
    // One operation that does not fit a record.
    fs.setxattr(f, b"user.one", &pattern(6, 65536), 0).unwrap();
    let c = cost(&mut fs, |fs| fs.fsync(f, false).unwrap());
    assert_eq!((c.0, c.3), (1, 1), "a checkpoint of one flush");
    assert_eq!(by(&fs, "fsync"), Some(2));
    // Images that do not fit: 200 inline files of 384 bytes, 512-byte images.
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &ctx()).unwrap().ino;
    fs.sync().unwrap();
    let mut last = 0;
    for i in 0..200 {
        last = create(&mut fs, d, &format!("i{i}"));
        fs.write(last, 0, &pattern(i, 384)).unwrap();
    }
    let c = cost(&mut fs, |fs| fs.fsync(last, false).unwrap());
    assert_eq!((c.0, c.3), (1, 1), "a checkpoint of one flush");
    assert_eq!(by(&fs, "fsync"), Some(3));
    let want = dump(&mut fs);
    assert_eq!(dump(&mut recover(image(&mut fs))), want);
}

/// Recovery time of the longest operation log the bounds allow: 4,096
/// operations since the last checkpoint (creates in a directory that grows
/// to a B-tree, renames, links, xattrs and unlinks), an fsync every 256 of
/// them, then a crash.
#[test]
fn the_longest_operation_log_recovers_everything() {
    let mut fs = mkfs(DEV_BYTES, MountConfig::default());
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, &ctx()).unwrap().ino;
    fs.sync().unwrap();
    let mut n = 0u64;
    let mut i = 0;
    while fs.oplog.ops_since_checkpoint() + 4 <= oplog::MAX_OPS {
        let f = create(&mut fs, d, &format!("file-{i:05}"));
        fs.rename(
            d,
            format!("file-{i:05}").as_bytes(),
            d,
            format!("r-{i:05}").as_bytes(),
            0,
        )
        .unwrap();
        fs.setxattr(f, b"user.x", b"value", 0).unwrap();
        if i % 2 == 0 {
            fs.unlink(d, format!("r-{i:05}").as_bytes()).unwrap();
        } else {
            fs.link(f, ROOT_INO, format!("l-{i:05}").as_bytes())
                .unwrap();
            fs.forget(f, 1);
        }
        n += 4;
        i += 1;
        if i % 64 == 0 {
            fs.fsync(d, false).unwrap();
        }
    }
    fs.fsync(d, false).unwrap();
    let causes = &fs.store.stats().checkpoints_by_cause;
    assert_eq!(
        causes.keys().copied().collect::<Vec<_>>(),
        ["mount", "sync"],
        "{causes:?}"
    );
    let want = dump(&mut fs);
    let img = image(&mut fs);
    let t = std::time::Instant::now();
    let mut back = Lsfs::open(Box::new(MemDevice::from_bytes(img.clone())), cfg()).unwrap();
    let took = t.elapsed();
    eprintln!(
        "recovery of {n} operations in {} records: {:.0} ms",
        back.replayed_records,
        took.as_secs_f64() * 1000.0
    );
    assert_eq!(dump(&mut back), want);
    assert_clean(&fsck_bytes(img), "before recovery");
}

/// An image an older lsfs wrote: no inline-items feature bit, and its last
/// fsync in the old record layout (data blocks, then the inode image in a
/// payload block of kind 5). It mounts read-only and read-write and rolls
/// the record forward; the read-write mount sets the feature bit in both
/// superblocks before anything else is written, and fsyncs work after.
#[test]
fn an_image_without_inline_items_still_mounts_and_rolls_forward() {
    let mut fs = mkfs(DEV_BYTES, cfg());
    let f = create(&mut fs, ROOT_INO, "f");
    fs.write(f, 0, &pattern(1, 5000)).unwrap();
    fs.sync().unwrap();
    let data = pattern(2, 8000);
    fs.write(f, 0, &data).unwrap();
    let set = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    fs.setattr(f, &set).unwrap();
    fs.fsync(f, false).unwrap();
    let want = dump(&mut fs);
    let (geo, fs_id, seg) = (
        fs.store.geo(),
        fs.store.superblock().fs_id,
        fs.store.log_head().0,
    );
    let mut img = image(&mut fs);
    drop(fs);

    // Rewrite the fsync record as the older format laid it out.
    let rec = segment_records(&mut MemDevice::from_bytes(img.clone()), &geo, fs_id, seg)
        .unwrap()
        .pop()
        .unwrap();
    assert!(rec.header.flags & FLAG_DSYNC != 0 && rec.header.entries.len() == 2);
    let got = items::decode(&rec.header.inline, "record").unwrap();
    let [Item::Inode { ino, image: head }] = &got[..] else {
        panic!("one inode image, no operation: {got:?}")
    };
    let mut payload: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            let at = rec.payload_block(i) as usize * BLOCK_BYTES;
            img[at..at + BLOCK_BYTES].to_vec()
        })
        .collect();
    let mut block = head.clone();
    block.resize(BLOCK_BYTES, 0);
    payload.push(block);
    let mut entries = rec.header.entries.clone();
    entries.push(SummaryEntry {
        ino: *ino,
        offset: 0,
        vblock: 0,
        cno: rec.header.cno,
        kind: BlockKind::InodeLog,
    });
    let old = RecordHeader {
        nblocks: summary_blocks(3) as u32 + 3,
        nsum_blocks: summary_blocks(3) as u32,
        entries,
        inline: Vec::new(),
        ..rec.header.clone()
    };
    let refs: Vec<&[u8]> = payload.iter().map(|p| &p[..]).collect();
    let bytes = old.encode(&refs);
    assert_eq!(
        bytes[80..128],
        [0; 48],
        "the older header: zero from byte 80"
    );
    let at = rec.block as usize * BLOCK_BYTES;
    img[at..at + bytes.len()].copy_from_slice(&bytes);
    let last = img.len() / BLOCK_BYTES - 1;
    for b in [0, last] {
        let r = b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES;
        let mut sb = Superblock::decode(&img[r.clone()], "test", img.len() as u64).unwrap();
        sb.features_incompat &= !(FEATURE_INCOMPAT_INLINE_ITEMS | FEATURE_INCOMPAT_MOVE_RECORDS);
        img[r].copy_from_slice(&sb.encode());
    }
    let features = |img: &[u8]| {
        [0, last].map(|b| {
            Superblock::decode(
                &img[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES],
                "t",
                img.len() as u64,
            )
            .unwrap()
            .features_incompat
        })
    };
    assert_eq!(features(&img), [0, 0]);

    // Read-only: rolled forward in memory, the image unchanged.
    assert_clean(&fsck_bytes(img.clone()), "the older image");
    let mut ro_cfg = cfg();
    ro_cfg.store.read_only = true;
    let mut ro = Lsfs::open(Box::new(MemDevice::from_bytes(img.clone())), ro_cfg).unwrap();
    assert_eq!(ro.replayed_records, 1);
    assert_eq!(dump(&mut ro), want);
    assert_eq!(features(&image(&mut ro)), [0, 0]);

    // Read-write: the same, and the features are set.
    let mut rw = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).unwrap();
    assert_eq!(rw.replayed_records, 1);
    assert_eq!(dump(&mut rw), want);
    let both = FEATURE_INCOMPAT_INLINE_ITEMS | FEATURE_INCOMPAT_MOVE_RECORDS;
    assert_eq!(features(&image(&mut rw)), [both, both]);
    let g = create(&mut rw, ROOT_INO, "g");
    rw.write(g, 0, b"after").unwrap();
    rw.fsync(g, false).unwrap();
    let want = dump(&mut rw);
    assert_eq!(dump(&mut recover(image(&mut rw))), want);
}

/// mkfs sets the inline-items and move-records features in the
/// superblock it writes.
#[test]
fn mkfs_sets_the_inline_items_feature() {
    let mut fs = mkfs(DEV_BYTES, MountConfig::default());
    assert!(fs.store.superblock().inline_items());
    let img = image(&mut fs);
    let sb = Superblock::decode(&img[..BLOCK_BYTES], "t", img.len() as u64).unwrap();
    assert_eq!(
        sb.features_incompat,
        FEATURE_INCOMPAT_INLINE_ITEMS | FEATURE_INCOMPAT_MOVE_RECORDS
    );
}
