//! The cleaner under pressure: a small file system kept near full by
//! overwrites must keep accepting writes, lose nothing, and keep its
//! per-segment counters exact (fsck recounts them).

mod common;

use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_vfs::{Ctx, Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

fn cfg() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.cache_blocks = 2048;
    c.store.protection_secs = 0;
    c
}

/// An in-memory file system of `mib` MiB with segments of `segment_blocks`.
fn mkfs(mib: u64, segment_blocks: u32, config: MountConfig) -> Lsfs {
    let opts = MkfsOptions {
        segment_blocks,
        label: "gc".into(),
    };
    Lsfs::mkfs(Box::new(MemDevice::new(mib << 20)), &opts, config).unwrap()
}

fn block(file: usize, version: u32) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[..8].copy_from_slice(&(file as u64).to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[100] = (file as u32 ^ version) as u8;
    b
}

fn fsck_clean(fs: &mut Lsfs) {
    fs.unmount().unwrap();
    let img = fs.store.dev_bytes_for_test();
    let rep = lsfs_core::fsck::fsck(Box::new(MemDevice::from_bytes(img))).unwrap();
    assert!(rep.errors.is_empty(), "fsck: {:#?}", rep.errors);
}

/// Rohner's hot/cold workload: 4 KiB files, 10 % of them get 90 % of the writes.
#[test]
fn hot_cold_overwrites_keep_running_near_full() {
    let mut fs = mkfs(64, 256, cfg());
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let capacity = fs.store.geo().total_segment_blocks() as usize;
    // With its inode (1/8 block) and DAT entry, a 4 KiB file takes about
    // 1.14 blocks: 60 % of the blocks in files is about 70 % used.
    let nfiles = capacity * 60 / 100;
    let mut versions = vec![0u32; nfiles];
    let inos = common::make_files(&mut fs, nfiles, |f| block(f, 0));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let hot = nfiles / 10;
    let rounds = capacity * 2;
    for i in 0..rounds {
        let f = if rng.gen_bool(0.9) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(hot..nfiles)
        };
        versions[f] += 1;
        if let Err(e) = fs.write(inos[f], 0, &block(f, versions[f])) {
            let u = &fs.store.segs().usage;
            let live: u64 = u.iter().map(|x| x.nlive as u64).sum();
            let snap: u64 = u.iter().map(|x| x.nsnapshot as u64).sum();
            let used = u.iter().filter(|x| x.nblocks > 0).count();
            let cands: Vec<_> = fs
                .store
                .cleanable_segments()
                .iter()
                .map(|c| c.nblocks - c.nlive)
                .collect();
            panic!(
                "write {i} of {rounds} failed: {e:?}; live {live} snap {snap} of {} blocks, {used} segments used, free {}, cps {}, reclaimable per cleanable segment {cands:?}, last pass {:?}",
                fs.store.geo().total_segment_blocks(),
                fs.store.segs().free_count(),
                fs.store.cps().entries.len(),
                fs.cleaner.last_pass
            );
        }
        if i % 100 == 0 {
            // Time passes, so old checkpoints leave the protection period.
            fs.clock().set_secs(t0 + i as u64);
            fs.tick().unwrap();
        }
    }
    for f in (0..nfiles).step_by(7) {
        assert_eq!(
            fs.read(inos[f], 0, 4096).unwrap(),
            block(f, versions[f]),
            "file {f}"
        );
    }
    fs.refresh_cleaner_stats();
    let st = fs.cleaner.stats.clone();
    assert!(st.segments_cleaned > 0, "the cleaner never ran: {st:?}");
    assert!(st.cleaner_amplification >= 1.0);
    // File data alone: copies are a part of what was written.
    assert!(
        st.file_data_copied > 0
            && st.file_data_copied <= st.blocks_copied
            && st.file_data_copied < st.file_data_written
            && st.file_data_cleaner_amplification
                == st.file_data_written as f64
                    / (st.file_data_written - st.file_data_copied) as f64,
        "{st:?}"
    );
    // The per-stream and per-class counters add up to the totals.
    let victims: u64 = st.by_stream.values().map(|t| t.victims).sum();
    let copied: u64 = st.by_stream.values().map(|t| t.copied).sum();
    assert_eq!(victims, st.segments_cleaned, "{:?}", st.by_stream);
    assert_eq!(copied, st.blocks_copied, "{:?}", st.by_stream);
    let by_class: u64 = fs.store.stats().blocks_by_class.values().sum();
    assert_eq!(
        by_class,
        fs.store.stats().payload_blocks_written,
        "{:?}",
        fs.store.stats().blocks_by_class
    );
    assert!(fs.store.stats().blocks_by_class[lsfs_core::log::record::FILE_DATA] >= rounds as u64);
    // Every DAT block made dirty is written by a checkpoint, punched out,
    // or kept with its changes in the DAT journal (a block the journal lets
    // go is written); overwrites and the cleaner both change the DAT.
    fs.checkpoint().unwrap();
    let stats = fs.store.stats();
    let dirtied: u64 = stats.dat_blocks_dirtied.values().sum();
    assert_eq!(
        dirtied + stats.dat_blocks_unjournaled,
        stats.blocks_by_class["dat"] + stats.dat_blocks_punched + stats.dat_blocks_journaled,
        "{:?}",
        stats.dat_blocks_dirtied
    );
    assert!(
        stats.dat_blocks_journaled > 0,
        "the DAT journal kept nothing"
    );
    for cause in ["allocate", "overwrite", "cleaner move"] {
        assert!(
            stats.dat_blocks_dirtied.get(cause).copied().unwrap_or(0) > 0,
            "no DAT block dirtied by {cause}: {:?}",
            stats.dat_blocks_dirtied
        );
    }
    eprintln!(
        "hot/cold, 60 % of blocks in files: {} passes, {} segments cleaned, WA {:.2}",
        st.passes, st.segments_cleaned, st.cleaner_amplification
    );
    fsck_clean(&mut fs);
}

/// Rohner §4.5.1: blocks a snapshot holds are copied, not lost; when the
/// snapshot goes, its segments become reclaimable.
#[test]
fn snapshot_blocks_survive_cleaning_and_are_released_after() {
    let mut fs = mkfs(32, 64, cfg());
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    let ctx = Ctx::default();
    let a = fs
        .mknod(ROOT_INO, b"data", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    let old: Vec<u8> = (0..2000 * 4096).map(|i| (i % 251) as u8).collect();
    fs.write(a.ino, 0, &old).unwrap();
    let snap = fs.snapshot_create().unwrap();
    // Overwrite most blocks: the old versions are dead but held by the snapshot.
    let new = vec![0xAB; 1800 * 4096];
    fs.write(a.ino, 0, &new).unwrap();
    fs.clock().set_secs(t0 + 100);
    fs.checkpoint().unwrap();
    let held: u32 = fs.store.segs().usage.iter().map(|u| u.nsnapshot).sum();
    assert!(held >= 1800, "snapshot holds only {held} blocks");
    // Clean everything cleanable: snapshot blocks move, never vanish.
    for _ in 0..10 {
        fs.clean(16, "test").unwrap();
    }
    // Copies count in their new segments once a checkpoint places them.
    fs.checkpoint().unwrap();
    let held_after: u32 = fs.store.segs().usage.iter().map(|u| u.nsnapshot).sum();
    assert_eq!(
        held_after, held,
        "cleaning changed how many blocks the snapshot holds"
    );
    let root = fs.lookup(ROOT_INO, b".lsfs").unwrap();
    let sd = fs.lookup(root.ino, b"snapshot").unwrap();
    let s = fs.lookup(sd.ino, snap.to_string().as_bytes()).unwrap();
    let f = fs.lookup(s.ino, b"data").unwrap();
    assert_eq!(
        fs.read(f.ino, 0, old.len() as u32).unwrap(),
        old,
        "snapshot content changed"
    );
    // Drop the snapshot: its blocks are now dead everywhere.
    let before = fs.store.segs().free_count();
    fs.clock().set_secs(t0 + 200);
    fs.snapshot_set(snap, false).unwrap();
    // O(1) in the foreground: the counters follow in the background.
    let held_now: u32 = fs.store.segs().usage.iter().map(|u| u.nsnapshot).sum();
    assert_eq!(
        held_now, held,
        "demoting changed counters in the foreground"
    );
    assert!(!fs.store.reconcile().is_settled());
    fs.reconcile_all().unwrap();
    let held_now: u32 = fs.store.segs().usage.iter().map(|u| u.nsnapshot).sum();
    assert_eq!(held_now, 0, "nsnapshot not released once reconciled");
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    for _ in 0..10 {
        fs.clean(16, "test").unwrap();
    }
    fs.checkpoint().unwrap();
    let after = fs.store.segs().free_count();
    assert!(
        after >= before + (1700 / 64) as u64,
        "dropping the snapshot freed only {} segments",
        after - before
    );
    assert_eq!(fs.read(a.ino, 0, new.len() as u32).unwrap(), new);
    fsck_clean(&mut fs);
}

/// Protection never costs copies. Under a long protection period every old
/// version of a rewritten region is seen by some plain checkpoint. A pass
/// without space pressure leaves such victims alone (and writes no
/// checkpoint when it changed nothing); a pass under pressure gives up the
/// oldest plain checkpoints as far as its victims need, and copies only
/// what the file system and snapshots still use. The snapshot survives.
#[test]
fn protection_gives_way_to_space_and_never_costs_copies() {
    let mut c = cfg();
    c.store.protection_secs = 3600;
    let mut fs = mkfs(16, 64, c);
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    fs.cleaner.enabled = false; // no cleaning but the passes below
    let ctx = Ctx::default();
    let a = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    for k in 0..48usize {
        fs.write(a.ino, (k * 4096) as u64, &block(k, 0)).unwrap();
    }
    let snap = fs.snapshot_create().unwrap();
    // Overwrite the region again and again, a checkpoint a second: every
    // old version is seen by a kept plain checkpoint.
    for v in 1..40u32 {
        fs.clock().set_secs(t0 + v as u64);
        for k in 0..48usize {
            fs.write(a.ino, (k * 4096) as u64, &block(k, v)).unwrap();
        }
        fs.checkpoint().unwrap();
    }
    fs.clock().set_secs(t0 + 41);
    let kept_before = fs.checkpoints().len();
    let cps = fs.store.stats().checkpoints_written;
    let calm = fs.clean(8, "interval").unwrap();
    assert_eq!(calm.blocks_copied, 0, "{calm:?}");
    assert!(calm.victims.is_empty(), "{calm:?}");
    assert_eq!(calm.checkpoints_given_up, 0);
    assert_eq!(
        fs.store.stats().checkpoints_written,
        cps,
        "a pass that changed nothing checkpointed"
    );
    assert_eq!(fs.checkpoints().len(), kept_before);

    let pressed = fs.clean(8, "low space").unwrap();
    assert!(!pressed.victims.is_empty(), "{pressed:?}");
    assert!(pressed.checkpoints_given_up > 0, "{pressed:?}");
    let dead_copied: u32 = pressed.victims.iter().map(|v| v.protected_copied).sum();
    let snapshot_held: u64 = pressed.protected_seen;
    assert!(
        dead_copied as u64 <= snapshot_held,
        "copied {dead_copied} dead blocks, more than the snapshot holds: {pressed:?}"
    );
    assert!(fs.checkpoints().len() < kept_before);
    assert!(
        fs.checkpoints()
            .iter()
            .any(|e| e.cno == snap && e.is_snapshot()),
        "the snapshot was given up"
    );
    assert_eq!(
        fs.cleaner.stats.checkpoints_given_up,
        pressed.checkpoints_given_up
    );
    fs.checkpoint().unwrap();
    for k in 0..48usize {
        assert_eq!(
            fs.read(a.ino, (k * 4096) as u64, 4096).unwrap(),
            block(k, 39)
        );
    }
    let root = fs.lookup(ROOT_INO, b".lsfs").unwrap();
    let sd = fs.lookup(root.ino, b"snapshot").unwrap();
    let s = fs.lookup(sd.ino, snap.to_string().as_bytes()).unwrap();
    let f = fs.lookup(s.ino, b"f").unwrap();
    for k in 0..48usize {
        assert_eq!(
            fs.read(f.ino, (k * 4096) as u64, 4096).unwrap(),
            block(k, 0),
            "snapshot block {k}"
        );
    }
    fsck_clean(&mut fs);
}

/// Blocks that died since the latest checkpoint are freed by a pass under
/// space pressure, not copied: that checkpoint is the recovery base until
/// the next one, but the victims are not reused before the next one is
/// durable either, and the next one gives up every plain checkpoint before
/// it. A crash in between recovers the latest checkpoint whole; promoting it
/// in between is refused; a snapshot is never given up.
#[test]
fn blocks_dead_since_the_latest_checkpoint_are_freed_not_copied() {
    let mut c = cfg();
    c.store.protection_secs = 3600;
    let mut fs = mkfs(16, 64, c.clone());
    let t0 = fs.store.now();
    fs.clock().set_secs(t0);
    fs.cleaner.enabled = false; // no cleaning but the pass below
    let ctx = Ctx::default();
    let a = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    let write_all = |fs: &mut Lsfs, v: u32| {
        for k in 0..48usize {
            fs.write(a.ino, (k * 4096) as u64, &block(k, v)).unwrap();
        }
    };
    write_all(&mut fs, 0);
    let snap = fs.snapshot_create().unwrap();
    fs.clock().set_secs(t0 + 1);
    write_all(&mut fs, 1);
    fs.checkpoint().unwrap();
    // Checkpoints of another file take version 1's segment out of the
    // recovery chain, where the cleaner does not look.
    let g = fs
        .mknod(ROOT_INO, b"g", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    let mut latest = 0;
    for v in 0..3u32 {
        for k in 0..64usize {
            fs.write(g.ino, (k * 4096) as u64, &block(100 + k, v))
                .unwrap();
        }
        latest = fs.checkpoint().unwrap();
    }
    // Version 1 dies after the latest checkpoint, which alone sees it.
    fs.clock().set_secs(t0 + 2);
    write_all(&mut fs, 2);
    let snapshot_held: u64 = fs
        .store
        .cleanable_segments()
        .iter()
        .map(|s| s.nsnapshot as u64)
        .sum();
    let pressed = fs.clean(8, "low space").unwrap();
    assert!(!pressed.victims.is_empty(), "{pressed:?}");
    assert!(
        pressed.freed_at_next_checkpoint >= 48,
        "version 1 was not freed: {pressed:?}"
    );
    // Dead blocks copied can only be the snapshot's.
    let copied_dead: u64 = pressed
        .victims
        .iter()
        .map(|v| v.protected_copied as u64)
        .sum();
    assert!(
        copied_dead <= snapshot_held,
        "copied {copied_dead} dead blocks, the snapshot holds {snapshot_held}: {pressed:?}"
    );

    // A crash now: the latest checkpoint is whole, fsck is clean.
    let crashed = fs.store.dev_bytes_for_test();
    {
        let mut r =
            Lsfs::open(Box::new(MemDevice::from_bytes(crashed.clone())), c.clone()).unwrap();
        let f = r.lookup(ROOT_INO, b"f").unwrap();
        for k in 0..48usize {
            assert_eq!(
                r.read(f.ino, (k * 4096) as u64, 4096).unwrap(),
                block(k, 1),
                "block {k} after a crash before the next checkpoint"
            );
        }
    }
    let rep = common::fsck_bytes(crashed);
    assert!(
        rep.errors.is_empty(),
        "fsck after the crash: {:#?}",
        rep.errors
    );

    // The latest checkpoint is given up with the next one: no promoting it.
    assert!(fs.snapshot_set(latest, true).is_err());
    let next = fs.checkpoint().unwrap();
    let plain: Vec<u64> = fs
        .checkpoints()
        .iter()
        .filter(|e| !e.is_snapshot())
        .map(|e| e.cno)
        .collect();
    assert_eq!(
        plain,
        vec![next],
        "plain checkpoints before {next} survived"
    );
    assert!(fs.store.stats().checkpoints_given_up_at_checkpoint >= 1);
    assert!(
        fs.checkpoints()
            .iter()
            .any(|e| e.cno == snap && e.is_snapshot()),
        "the snapshot was given up"
    );
    // The victims are reused: write the file over twice more.
    for v in 3..5 {
        fs.clock().set_secs(t0 + v as u64);
        write_all(&mut fs, v);
        fs.clean(8, "low space").unwrap();
        fs.checkpoint().unwrap();
    }
    for k in 0..48usize {
        assert_eq!(
            fs.read(a.ino, (k * 4096) as u64, 4096).unwrap(),
            block(k, 4)
        );
    }
    let root = fs.lookup(ROOT_INO, b".lsfs").unwrap();
    let sd = fs.lookup(root.ino, b"snapshot").unwrap();
    let s = fs.lookup(sd.ino, snap.to_string().as_bytes()).unwrap();
    let f = fs.lookup(s.ino, b"f").unwrap();
    for k in 0..48usize {
        assert_eq!(
            fs.read(f.ino, (k * 4096) as u64, 4096).unwrap(),
            block(k, 0),
            "snapshot block {k}"
        );
    }
    fsck_clean(&mut fs);
}

/// Cold blocks the cleaner moves leave the hot stream. A moved block's
/// temperature used to be its victim segment's age, so cold blocks the
/// cleaner had once moved into a young segment stayed "hot" for ever; now it
/// is the block's own age (from its DAT entry), and the hot segments hold
/// about the hot files.
#[test]
fn moved_cold_blocks_leave_the_hot_stream() {
    use lsfs_core::meta::stream::Stream;
    let mut fs = mkfs(128, 128, cfg());
    let t0 = fs.store.now();
    let nfiles = (fs.store.free_blocks() as f64 * 0.75 / 1.14) as usize;
    let inos = common::make_files(&mut fs, nfiles, |f| block(f, 0));
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let hot = nfiles / 10;
    for i in 0..3 * nfiles {
        let f = if rng.gen_bool(0.9) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(hot..nfiles)
        };
        fs.write(inos[f], 0, &block(f, i as u32 + 1)).unwrap();
        if i % 64 == 0 {
            fs.clock().set_secs(t0 + 1 + i as u64 / 64);
            fs.tick().unwrap();
        }
    }
    fs.checkpoint().unwrap();
    let live_in = |s: Stream| -> u64 {
        fs.store
            .segs()
            .usage
            .iter()
            .filter(|u| Stream::from_flags(u.flags) == s)
            .map(|u| u.nlive as u64)
            .sum()
    };
    let (hot_live, cleaner_live) = (live_in(Stream::HotUser), live_in(Stream::Cleaner));
    let written = fs.store.streams().blocks_written;
    assert!(
        fs.cleaner.stats.segments_cleaned > 0 && written[Stream::HotUser as usize] > 0,
        "neither the cleaner nor the hot stream ran: {written:?}"
    );
    assert!(
        hot_live <= 3 * hot as u64 && cleaner_live > 0,
        "{hot_live} live blocks in hot segments for {hot} hot files \
         ({cleaner_live} in the cleaner's); blocks per stream {written:?}"
    );
    fsck_clean(&mut fs);
}

/// A remount reopens each data stream's partly filled segment instead of
/// starting a fresh one: eight mounts that each write a little cold data
/// fill one cold segment, not eight (before: eight, each a few blocks
/// full, for the cleaner to compact). Everything reads back and fsck is
/// clean, after clean unmounts and after a crash (no unmount) alike.
#[test]
fn remounts_resume_the_data_streams_open_segments() {
    use lsfs_core::meta::stream::Stream;
    let mut fs = mkfs(64, 128, cfg());
    let mut inos = Vec::new();
    for round in 0..8 {
        let a = fs
            .mknod(
                ROOT_INO,
                format!("f{round}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
                &Ctx::default(),
            )
            .unwrap();
        fs.write(a.ino, 0, &[block(round, 0), block(round, 1)].concat())
            .unwrap();
        inos.push(a.ino);
        fs.checkpoint().unwrap();
        // Every other round ends in a crash after the checkpoint.
        if round % 2 == 0 {
            fs.unmount().unwrap();
        }
        let img = fs.store.dev_bytes_for_test();
        fs = Lsfs::open(Box::new(MemDevice::from_bytes(img)), cfg()).unwrap();
    }
    let cold: Vec<(u64, u32)> = (0..fs.store.segs().nsegments())
        .filter_map(|g| {
            let u = &fs.store.segs().usage[g as usize];
            (u.nblocks > 0 && Stream::from_flags(u.flags) == Stream::ColdUser)
                .then_some((g, u.nblocks))
        })
        .collect();
    assert!(
        fs.store.streams().enabled && !cold.is_empty(),
        "the cold stream never ran"
    );
    assert_eq!(
        cold.len(),
        1,
        "cold-stream segments (segment, blocks written) after 8 mounts: {cold:?}"
    );
    for (round, &ino) in inos.iter().enumerate() {
        let got = fs.read(ino, 0, 2 * 4096).unwrap();
        assert_eq!(
            got,
            [block(round, 0), block(round, 1)].concat(),
            "file {round}"
        );
    }
    fsck_clean(&mut fs);
}

/// One file hot in one region and cold in another, as a database or a VM
/// image is: an overwrite goes to the hot or the cold stream by how long the
/// version it replaces lived, not by the file's history (which calls the
/// whole file hot), and the cleaner keeps a moved cold block cold.
#[test]
fn overwrites_are_routed_by_their_own_blocks_lifetime() {
    use lsfs_core::meta::stream::Stream;
    let mut fs = mkfs(128, 128, cfg());
    let t0 = fs.store.now();
    let ctx = Ctx::default();
    let a = fs
        .mknod(ROOT_INO, b"db", libc::S_IFREG | 0o644, 0, &ctx)
        .unwrap();
    const COLD: u64 = 2000;
    const HOT: u64 = 64;
    for k in 0..COLD {
        fs.write(a.ino, k * 4096, &block(k as usize, 0)).unwrap();
    }
    fs.checkpoint().unwrap();
    // The hot region (the first HOT blocks) is rewritten a checkpoint apart,
    // many times: its versions live one checkpoint each.
    for round in 1..=60u32 {
        fs.clock().set_secs(t0 + round as u64);
        for k in 0..HOT {
            fs.write(a.ino, k * 4096, &block(k as usize, round))
                .unwrap();
        }
        fs.checkpoint().unwrap();
    }
    // Now one cold block (written once, 61 checkpoints ago) and one hot
    // block more; the file as a whole is hot.
    let cold_block = COLD - 1;
    fs.write(a.ino, cold_block * 4096, &block(cold_block as usize, 99))
        .unwrap();
    fs.write(a.ino, 0, &block(0, 99)).unwrap();
    fs.checkpoint().unwrap();
    let stream_of = |fs: &mut Lsfs, k: u64| -> Stream {
        let v = fs.file_vblock_for_test(a.ino, k).unwrap().expect("mapped");
        let e = fs.store.dat_get(v).unwrap();
        let seg = fs.store.geo().segment_of(e.pblock).unwrap();
        Stream::from_flags(fs.store.segs().usage[seg as usize].flags)
    };
    assert_eq!(stream_of(&mut fs, 0), Stream::HotUser);
    assert_eq!(
        stream_of(&mut fs, cold_block),
        Stream::ColdUser,
        "a long-lived block of a hot file went to the hot stream"
    );
    // The rewritten cold block remembers what it replaced.
    let v = fs.file_vblock_for_test(a.ino, cold_block).unwrap().unwrap();
    let e = fs.store.dat_get(v).unwrap();
    assert!(e.prev_start != 0 && e.prev_start < e.start, "{e:?}");
    fsck_clean(&mut fs);
}

/// Relocation takes the blocks it copies from the records it read to plan
/// the victim (gc/victim_reads.rs): with the cache emptied, moving a
/// segment of live blocks costs the plan's reads (two per record) and the
/// DAT's, not one read per block copied. The copies read back intact.
#[test]
fn relocation_reads_its_victim_once() {
    let mut fs = mkfs(16, 64, cfg());
    let f = fs
        .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &common::ctx())
        .unwrap();
    let data = common::pattern(11, 48 * 4096);
    fs.write(f.ino, 0, &data).unwrap();
    fs.checkpoint().unwrap();
    let seg = (0..fs.store.segs().nsegments())
        .max_by_key(|&s| fs.store.segs().usage[s as usize].nlive)
        .unwrap();
    fs.store.drop_clean_cache();
    let before = fs.store.device_counters();
    let r = fs.store.relocate_segment(seg).unwrap();
    let reads = fs.store.device_counters().reads - before.reads;
    assert!(r.live_copied >= 32, "{r:?}");
    assert!(
        reads * 2 < r.live_copied as u64,
        "{reads} device reads to move {} blocks",
        r.live_copied
    );
    fs.checkpoint().unwrap();
    fs.store.drop_clean_cache();
    let mut back = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let got = fs.read(f.ino, off as u64, 65536).unwrap();
        assert!(!got.is_empty());
        off += got.len();
        back.extend(got);
    }
    assert!(back == data, "the moved blocks read back changed");
    fsck_clean(&mut fs);
}
