//! Threaded logging: near full, user data goes into the holes of full,
//! partly valid segments (their summaries moved to the SSA) instead of into
//! segments the cleaner must free by copying. What was written reads back,
//! across remounts; snapshots keep what they see; fsck's recount agrees;
//! plugged segments can be cleaned like any other.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::Vfs;

const FILE_BYTES: usize = 16 * 1024;
/// The simulated clock's start (seconds since the epoch).
const T0: u64 = 1_800_000_000;

fn plug_cfg(mode: &str) -> MountConfig {
    let mut c = cfg_no_protection();
    c.store.cache_blocks = 1024;
    c.store.streams_min_segments = 0;
    c.cleaner.threaded_logging = mode.parse().unwrap();
    c
}

struct Xorshift(u64);
impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Fill `fs` with 16 KiB files to `fill` of what statfs offers, then
/// overwrite random files `rounds` times the file count; returns the inodes,
/// the seed of each file's content, and the random source.
fn fill_and_overwrite(fs: &mut Lsfs, fill: f64, rounds: u64) -> (Vec<u64>, Vec<u64>, Xorshift) {
    fs.clock().set_secs(T0);
    let usable = fs.store.free_blocks() * 4096;
    let nfiles = (usable as f64 * fill / FILE_BYTES as f64) as usize;
    let inos = make_files(fs, nfiles, |f| pattern(f as u64, FILE_BYTES));
    for &ino in &inos {
        fs.forget(ino, 1);
    }
    fs.sync().unwrap();
    let mut latest: Vec<u64> = (0..nfiles as u64).collect();
    let mut rng = Xorshift(0x9e3779b97f4a7c15);
    overwrite(fs, &inos, &mut latest, &mut rng, nfiles as u64 * rounds);
    (inos, latest, rng)
}

/// `writes` random overwrites, a sync every 64.
fn overwrite(fs: &mut Lsfs, inos: &[u64], latest: &mut [u64], rng: &mut Xorshift, writes: u64) {
    for w in 0..writes {
        // A simulated clock, a second per 16 writes: policies rank victims
        // by age, and the wall clock would make every run different.
        let now = if fs.clock().is_set() {
            fs.clock().secs()
        } else {
            T0
        };
        fs.clock().set_secs(now + (w % 16 == 0) as u64);
        let i = (rng.next() % inos.len() as u64) as usize;
        let seed = 1_000_000 + rng.next() % 1_000_000_000;
        fs.write(inos[i], 0, &pattern(seed, FILE_BYTES))
            .unwrap_or_else(|e| {
                panic!(
                    "overwrite of file {i}: {e:?}; plug stats {:?}",
                    fs.store.plugs().stats()
                )
            });
        latest[i] = seed;
        if w % 64 == 63 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
}

fn plugged_segments(fs: &Lsfs) -> usize {
    (0..fs.store.segs().nsegments())
        .filter(|&g| fs.store.segment_is_plugged(g))
        .count()
}

fn check_contents(fs: &mut Lsfs, inos: &[u64], latest: &[u64], what: &str) {
    for (i, &ino) in inos.iter().enumerate() {
        let got = fs.read(ino, 0, FILE_BYTES as u32).unwrap();
        assert!(
            got == pattern(latest[i], FILE_BYTES),
            "{what}: file {i} (inode {ino}) does not hold its last write"
        );
    }
}

#[test]
fn plugged_holes_hold_user_data_across_remounts_and_fsck_agrees() {
    let mut fs = mkfs(32 * MIB, plug_cfg("always"));
    let (inos, mut latest, mut rng) = fill_and_overwrite(&mut fs, 0.75, 0);
    // Overwrite until some segments are plugged at a sync (the cleaner
    // takes plugged segments too, so there are not always some).
    for _ in 0..400 {
        overwrite(&mut fs, &inos, &mut latest, &mut rng, 32);
        if fs.store.plugs().stats().blocks_plugged > 2000 && plugged_segments(&fs) > 0 {
            break;
        }
    }
    let st = fs.store.plugs().stats().clone();
    eprintln!("plug stats {st:?}; cleaner {:?}", fs.cleaner.stats.passes);
    assert!(
        st.segments_prepared > 0 && st.blocks_plugged > 100,
        "near full under \"always\", nothing was plugged: {st:?}"
    );
    assert!(plugged_segments(&fs) > 0, "no segment flagged plugged");
    assert!(
        fs.store.roots().ssa_root != 0,
        "plugged segments but no SSA"
    );
    check_contents(&mut fs, &inos, &latest, "mounted");
    fs.sync().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "after plugging");
    fs.unmount().unwrap();
    let bytes = image(&mut fs);
    drop(fs);

    let mut fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), plug_cfg("off")).unwrap();
    check_contents(&mut fs, &inos, &latest, "remounted");
    // Cleaning the plugged segments walks their SSA, not their records.
    let before = plugged_segments(&fs);
    assert!(before > 0, "the plugged flag did not survive the remount");
    for _ in 0..64 {
        fs.clean(8, "foreground").unwrap();
        fs.checkpoint().unwrap();
    }
    let after = plugged_segments(&fs);
    assert!(
        after < before,
        "cleaning never took a plugged segment ({before} before, {after} after)"
    );
    check_contents(&mut fs, &inos, &latest, "after cleaning plugged segments");
    fs.unmount().unwrap();
    assert_clean(
        &fsck_bytes(image(&mut fs)),
        "after cleaning plugged segments",
    );
}

#[test]
fn plugging_never_overwrites_what_a_snapshot_sees() {
    let mut fs = mkfs(24 * MIB, plug_cfg("always"));
    let usable = fs.store.free_blocks() * 4096;
    let nfiles = (usable as f64 * 0.42 / FILE_BYTES as f64) as usize;
    let inos = make_files(&mut fs, nfiles, |f| pattern(f as u64, FILE_BYTES));
    let snap = fs.snapshot_create().unwrap();
    // Overwrite everything once (the snapshot now holds half the space),
    // then keep overwriting under pressure.
    let mut latest: Vec<u64> = (0..nfiles as u64).collect();
    let mut rng = Xorshift(7);
    for w in 0..nfiles as u64 * 4 {
        let i = if w < nfiles as u64 {
            w as usize
        } else {
            (rng.next() % nfiles as u64) as usize
        };
        fs.write(inos[i], 0, &pattern(5_000_000 + w, FILE_BYTES))
            .unwrap_or_else(|e| panic!("overwrite {w}: {e:?}"));
        latest[i] = 5_000_000 + w;
        if w % 64 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    assert!(
        fs.store.plugs().stats().blocks_plugged > 0,
        "nothing plugged: {:?}",
        fs.store.plugs().stats()
    );
    check_contents(&mut fs, &inos, &latest, "live");
    fs.unmount().unwrap();
    let bytes = image(&mut fs);
    assert_clean(&fsck_bytes(bytes.clone()), "with a snapshot");
    drop(fs);
    let mut config = plug_cfg("off");
    config.checkpoint = Some(snap);
    let mut old = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), config).unwrap();
    let first: Vec<u64> = (0..nfiles as u64).collect();
    check_contents(&mut old, &inos, &first, "the snapshot");
}

#[test]
fn off_never_plugs() {
    let mut fs = mkfs(24 * MIB, plug_cfg("off"));
    let (inos, latest, _) = fill_and_overwrite(&mut fs, 0.85, 1);
    assert_eq!(fs.store.plugs().stats().segments_prepared, 0);
    assert_eq!(fs.store.roots().ssa_root, 0);
    check_contents(&mut fs, &inos, &latest, "off");
}
