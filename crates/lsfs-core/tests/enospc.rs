//! A full file system: writes fail with ENOSPC (not EIO, not a panic), what
//! was written stays readable and durable, fsck stays clean, and deleting
//! files frees space so that writes succeed again.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::Lsfs;
use lsfs_vfs::{Errno, Vfs, ROOT_INO};

const DEV_BYTES: u64 = 12 * MIB;
const FILE_BYTES: usize = 256 * 1024;
const CHUNK: usize = 64 * 1024;

#[test]
fn full_fs_says_enospc_keeps_data_and_recovers_after_deletes() {
    let mut fs = mkfs(DEV_BYTES, cfg_no_protection());
    let clock0 = lsfs_core::meta::store::wall_secs();
    let mut tick = 0;
    // The clock moves a second per file, so plain checkpoints expire and
    // reclaim can free what deletes kill.
    let mut advance = |fs: &mut Lsfs| {
        tick += 1;
        fs.clock().set_secs(clock0 + tick);
    };
    let c = ctx();
    let mut files: Vec<(Vec<u8>, u64, Vec<u8>)> = Vec::new();
    let mut full = None;
    'fill: for i in 0..1000u64 {
        advance(&mut fs);
        let name = format!("f{i}").into_bytes();
        let a = match fs.mknod(ROOT_INO, &name, libc::S_IFREG | 0o644, 0, &c) {
            Ok(a) => a,
            Err(e) => {
                full = Some(e);
                break;
            }
        };
        fs.forget(a.ino, 1);
        let mut content = Vec::new();
        for k in 0..FILE_BYTES / CHUNK {
            let data = pattern(i * 100 + k as u64, CHUNK);
            match fs.write(a.ino, content.len() as u64, &data) {
                Ok(n) => {
                    assert_eq!(n as usize, CHUNK);
                    content.extend_from_slice(&data);
                }
                Err(e) => {
                    full = Some(e);
                    files.push((name, a.ino, content));
                    break 'fill;
                }
            }
        }
        files.push((name, a.ino, content));
    }
    assert_eq!(full, Some(Errno::NOSPC), "filling must end with ENOSPC");
    assert!(
        files.len() * FILE_BYTES > 6 * MIB as usize,
        "ENOSPC after only {} files of a 12 MiB device",
        files.len()
    );
    // Still writable (for what fits) and consistent.
    fs.sync()
        .expect("a checkpoint must always fit in the reserve");
    assert_clean(&fsck_bytes(image(&mut fs)), "a full image");
    let check = |fs: &mut Lsfs, files: &[(Vec<u8>, u64, Vec<u8>)], what: &str| {
        for (name, _, content) in files {
            let a = fs.lookup(ROOT_INO, name).unwrap();
            fs.forget(a.ino, 1);
            assert_eq!(a.size, content.len() as u64, "{what}: size of {name:?}");
            let got = fs.read(a.ino, 0, FILE_BYTES as u32 + 1).unwrap();
            assert!(&got == content, "{what}: contents of {name:?}");
        }
    };
    check(&mut fs, &files, "after ENOSPC");
    fs.unmount().unwrap();
    let bytes = image(&mut fs);
    drop(fs);
    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), cfg_no_protection()).unwrap();
    check(&mut fs, &files, "after reopen");
    // Delete all but the last two files; after a few checkpoints (time moving
    // on), their segments are free again.
    let keep = files.split_off(files.len() - 2);
    for (name, _, _) in &files {
        fs.unlink(ROOT_INO, name).unwrap();
    }
    // What the background frees over the next ticks, at once.
    fs.reclaim_all().unwrap();
    for _ in 0..4 {
        advance(&mut fs);
        fs.checkpoint().unwrap();
    }
    assert!(
        fs.store.stats().segments_reclaimed > 0,
        "nothing was reclaimed"
    );
    let a = fs
        .mknod(ROOT_INO, b"again", libc::S_IFREG | 0o644, 0, &c)
        .expect("space is back after deletes");
    let data = pattern(77, 4 * MIB as usize);
    fs.write(a.ino, 0, &data).expect("a 4 MiB write fits again");
    fs.fsync(a.ino, false).unwrap();
    check(&mut fs, &keep, "after deletes");
    assert!(fs.read(a.ino, 0, data.len() as u32).unwrap() == data);
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the image after refilling");
}

/// A snapshot keeps deleted data: space comes back only when the snapshot
/// is demoted, and the counters stay exact all along.
#[test]
fn snapshot_holds_space_until_demoted() {
    let mut fs = mkfs(DEV_BYTES, cfg_no_protection());
    let clock0 = lsfs_core::meta::store::wall_secs();
    let c = ctx();
    let mut names = Vec::new();
    for i in 0..1000u64 {
        fs.clock().set_secs(clock0 + i);
        let name = format!("f{i}").into_bytes();
        let a = match fs.mknod(ROOT_INO, &name, libc::S_IFREG | 0o644, 0, &c) {
            Ok(a) => a,
            Err(e) => {
                assert_eq!(e, Errno::NOSPC);
                break;
            }
        };
        fs.forget(a.ino, 1);
        if let Err(e) = fs.write(a.ino, 0, &pattern(i, FILE_BYTES)) {
            assert_eq!(e, Errno::NOSPC);
            fs.unlink(ROOT_INO, &name).unwrap();
            break;
        }
        names.push(name);
    }
    // A snapshot of the full file system: it keeps every file.
    let snap = fs
        .snapshot_create()
        .expect("a checkpoint fits in the reserve");
    assert!(names.len() > 12, "only {} files fit", names.len());
    for n in &names {
        fs.unlink(ROOT_INO, n).unwrap();
    }
    let mut t = 2000;
    let mut settle = |fs: &mut Lsfs| {
        for _ in 0..4 {
            t += 1;
            fs.clock().set_secs(clock0 + t);
            fs.checkpoint().unwrap();
        }
    };
    settle(&mut fs);
    assert_clean(&fsck_bytes(image(&mut fs)), "all deleted, snapshot kept");
    // The snapshot still has the first files, readable from the image.
    let mut old_cfg = cfg_no_protection();
    old_cfg.checkpoint = Some(snap);
    old_cfg.store.read_only = true;
    let mut old = Lsfs::open(Box::new(MemDevice::from_bytes(image(&mut fs))), old_cfg).unwrap();
    let a = old.lookup(ROOT_INO, b"f3").unwrap();
    assert!(old.read(a.ino, 0, FILE_BYTES as u32).unwrap() == pattern(3, FILE_BYTES));
    // Read-only: sync (as at unmount) has nothing to write and succeeds;
    // writes are refused.
    assert_eq!(old.sync(), Ok(()));
    assert_eq!(old.write(a.ino, 0, b"x"), Err(Errno::ROFS));
    drop(old);
    let a = fs
        .mknod(ROOT_INO, b"big", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    assert_eq!(
        fs.write(a.ino, 0, &pattern(4, 2 * MIB as usize)),
        Err(Errno::NOSPC),
        "deleted files held by a snapshot must not free space"
    );
    fs.unlink(ROOT_INO, b"big").unwrap();
    fs.snapshot_set(snap, false).unwrap();
    settle(&mut fs);
    assert_clean(&fsck_bytes(image(&mut fs)), "after demoting the snapshot");
    let a = fs
        .mknod(ROOT_INO, b"again", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    let data = pattern(5, 5 * MIB as usize);
    fs.write(a.ino, 0, &data)
        .expect("space is back once the snapshot is gone");
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "refilled");
}

/// Regression (fsx, 1M operations, stopped at 223,014 with ENOSPC): with the
/// default protection period, frequent checkpoints keep every overwritten
/// block protected. A small image must keep accepting overwrites by giving
/// up plain checkpoints inside the protection period (never snapshots),
/// instead of copying protected blocks around until ENOSPC.
#[test]
fn overwrites_under_the_protection_period_never_hit_enospc() {
    let mut fs = mkfs(16 * MIB, cfg());
    assert!(
        fs.store.config().protection_secs >= 3600,
        "default protection"
    );
    let c = ctx();
    let a = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &c)
        .unwrap();
    let rounds = 16 * MIB / (64 * 1024) * 4;
    let mut content = Vec::new();
    for r in 0..rounds {
        let data = pattern(r, 64 * 1024);
        fs.write(a.ino, 0, &data)
            .unwrap_or_else(|e| panic!("round {r} of {rounds}: write: {e:?}"));
        fs.setattr(
            a.ino,
            &lsfs_vfs::SetAttr {
                size: Some(32 * 1024),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("round {r}: truncate: {e:?}"));
        fs.fsync(a.ino, false)
            .unwrap_or_else(|e| panic!("round {r}: fsync: {e:?}"));
        content = data[..32 * 1024].to_vec();
    }
    assert_eq!(fs.read(a.ino, 0, 64 * 1024).unwrap(), content);
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after the overwrites");
}

/// Filled with live data to 85 % of the space statfs shows (about 90 % of
/// every segment the cleaner can pick), uniform random overwrites (default
/// protection period, an fsync every few writes) keep succeeding for four
/// times the file count: the cleaner and the reserve always make progress.
/// (Uniform random overwrites are the cleaner's worst case: at 90 % of the
/// visible space every segment is about 92 % live, and moving a victim's
/// blocks rewrites about 20 DAT blocks per 256-block segment, so cleaning no
/// longer gains anything; see docs/CLEANER.md.)
#[test]
fn eighty_five_percent_full_keeps_accepting_overwrites() {
    // An 8 MiB cache: the cleaner moves several victims per pass, as with
    // the default 64 MiB cache and 8 MiB segments.
    let mut config = cfg();
    config.store.cache_blocks = 2048;
    let mut fs = mkfs(32 * MIB, config);
    let c = ctx();
    let usable = fs.store.free_blocks() * 4096;
    let nfiles = usable * 85 / 100 / (64 * 1024);
    let mut inos = Vec::new();
    for i in 0..nfiles {
        let a = fs
            .mknod(
                ROOT_INO,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                &c,
            )
            .unwrap();
        fs.forget(a.ino, 1);
        fs.write(a.ino, 0, &pattern(i, 64 * 1024))
            .unwrap_or_else(|e| {
                let u = &fs.store.segs().usage;
                let live: u64 = u.iter().map(|u| u.nlive as u64).sum();
                let used: u64 = u.iter().map(|u| u.nblocks as u64).sum();
                panic!(
                    "fill file {i} of {nfiles}: {e:?}: {live} live blocks, {used} used, {} free segments of {}, {} checkpoints, stats {:?}",
                    fs.store.segs().free_count(),
                    u.len(),
                    fs.store.cps().entries.len(),
                    fs.cleaner.stats
                )
            });
        inos.push(a.ino);
    }
    fs.sync().unwrap();
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut latest = vec![0u64; inos.len()];
    for (i, l) in latest.iter_mut().enumerate() {
        *l = i as u64;
    }
    let writes = nfiles * 4;
    for w in 0..writes {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % inos.len() as u64) as usize;
        let seed = 1_000_000 + w;
        fs.write(inos[i], 0, &pattern(seed, 64 * 1024))
            .unwrap_or_else(|e| panic!("overwrite {w} of {writes}: {e:?}"));
        latest[i] = seed;
        if w % 8 == 0 {
            fs.fsync(inos[i], false).unwrap();
        }
    }
    for (i, &ino) in inos.iter().enumerate() {
        assert!(
            fs.read(ino, 0, 64 * 1024).unwrap() == pattern(latest[i], 64 * 1024),
            "file {i}"
        );
    }
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after overwrites at 85 %");
}
