//! The inode journal (meta/ijournal.rs): changed inodes packed eight to a
//! block, written back into the IFILE past a bound; read by mounts, views
//! of older checkpoints and fsck.

mod common;

use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{SetAttr, Vfs, ROOT_INO};
use rand::{Rng, SeedableRng};

fn with_journal(blocks: Option<u64>) -> MountConfig {
    let mut c = cfg_no_protection();
    c.store.ijournal_max_blocks = blocks;
    c
}

fn reopen(fs: &mut Lsfs, c: MountConfig) -> Lsfs {
    fs.unmount().unwrap();
    Lsfs::open(Box::new(MemDevice::from_bytes(image(fs))), c).unwrap()
}

/// Sizes of every file, in inode order: what the inodes say.
fn sizes(fs: &mut Lsfs, inos: &[u64]) -> Vec<u64> {
    inos.iter().map(|&i| fs.getattr(i).unwrap().size).collect()
}

fn resize(fs: &mut Lsfs, ino: u64, size: u64) {
    let a = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(ino, &a).unwrap();
}

/// Random inodes changed between checkpoints: with a bound of 4 blocks the
/// journal never keeps more (nor more than 16 images), writes its oldest
/// images back and compacts sparse blocks, and what every inode says
/// survives remounts and passes fsck.
#[test]
fn the_journal_stays_within_its_bound_and_loses_nothing() {
    let c = with_journal(Some(4));
    let mut fs = mkfs(32 * MIB, c.clone());
    let inos = make_files(&mut fs, 300, |_| Vec::new());
    let mut want: Vec<u64> = vec![0; inos.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // Journal blocks written, images written back, images compacted; over the mounts.
    let mut counts = (0, 0, 0);
    for round in 0..40 {
        for _ in 0..25 {
            let f = rng.gen_range(0..inos.len());
            want[f] = rng.gen_range(0..100_000);
            resize(&mut fs, inos[f], want[f]);
        }
        fs.checkpoint().unwrap();
        let j = &fs.store.ijournal;
        assert!(
            j.blocks() <= 4 && j.len() <= 16,
            "round {round}: {} journal blocks, {} images",
            j.blocks(),
            j.len()
        );
        if round % 10 == 9 {
            let st = &fs.store.stats;
            counts.0 += st.ijournal_blocks_written;
            counts.1 += st.ijournal_images_written_back;
            counts.2 += st.ijournal_images_compacted;
            fs = reopen(&mut fs, c.clone());
            assert_eq!(sizes(&mut fs, &inos), want, "after remount {round}");
        }
    }
    assert!(
        counts.0 > 0 && counts.1 > 0,
        "journal blocks written, written back: {counts:?}"
    );
    assert_eq!(sizes(&mut fs, &inos), want);
    assert_clean(&fsck_bytes(image(&mut fs)), "after the churn");
}

/// A checkpoint's inodes are its IFILE plus its journal: a snapshot
/// mounted read-only, and browsed in the live mount, shows the inodes as they were, though the live file
/// system has written its journal back since, and files it deleted.
#[test]
fn an_old_checkpoint_shows_its_own_journal() {
    let c = with_journal(Some(2));
    let mut fs = mkfs(32 * MIB, c.clone());
    let inos = make_files(&mut fs, 40, |_| Vec::new());
    for (k, &i) in inos.iter().enumerate() {
        resize(&mut fs, i, 1000 + k as u64);
    }
    let cno = fs.snapshot_create().unwrap();
    let before = sizes(&mut fs, &inos);
    assert!(
        fs.store.ijournal.len() > 0,
        "the checkpoint left nothing in the journal"
    );
    let d = fs.lookup(ROOT_INO, b"f0").unwrap();
    fs.unlink(ROOT_INO, b"f0").unwrap();
    for round in 0..20u64 {
        for &i in &inos[1..] {
            resize(&mut fs, i, 5000 + round);
        }
        fs.checkpoint().unwrap();
    }
    assert!(fs.store.stats.ijournal_images_written_back > 0);
    fs.unmount().unwrap();
    let mut old_cfg = c.clone();
    old_cfg.checkpoint = Some(cno);
    old_cfg.store.read_only = true;
    let mut old = Lsfs::open(Box::new(MemDevice::from_bytes(image(&mut fs))), old_cfg).unwrap();
    assert_eq!(sizes(&mut old, &inos), before);
    assert_eq!(old.lookup(ROOT_INO, b"f0").unwrap().ino, d.ino);
    let mut now = Lsfs::open(Box::new(MemDevice::from_bytes(image(&mut fs))), c).unwrap();
    assert!(now.lookup(ROOT_INO, b"f0").is_err());
    assert_eq!(sizes(&mut now, &inos[1..]), vec![5019; inos.len() - 1]);
    // The same snapshot browsed in the live mount (its own inode numbers).
    let ctl = now.lookup(ROOT_INO, b".lsfs").unwrap();
    let sd = now.lookup(ctl.ino, b"snapshot").unwrap();
    let snap = now.lookup(sd.ino, cno.to_string().as_bytes()).unwrap();
    for (k, want) in before.iter().enumerate() {
        let name = format!("f{k}");
        assert_eq!(
            now.lookup(snap.ino, name.as_bytes()).unwrap().size,
            *want,
            "{name}"
        );
    }
    assert_clean(&fsck_bytes(image(&mut fs)), "with the old checkpoint kept");
}

/// Blocks of inode metadata written for a hot/cold workload: a random tenth
/// of the files takes 90 % of the changes, as in the cleaner's benchmark.
fn inode_blocks_written(journal: Option<u64>) -> (u64, Vec<u64>) {
    let mut fs = mkfs(64 * MIB, with_journal(journal));
    let n = 4000;
    let inos = make_files(&mut fs, n, |_| Vec::new());
    fs.checkpoint().unwrap();
    let class = |fs: &Lsfs, c: &str| fs.store.stats.blocks_by_class.get(c).copied().unwrap_or(0);
    let start = class(&fs, "ifile") + class(&fs, "inode journal");
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    let hot = &order[..n / 10];
    for step in 0..6000u64 {
        let f = if rng.gen_bool(0.9) {
            hot[rng.gen_range(0..hot.len())]
        } else {
            order[rng.gen_range(n / 10..n)]
        };
        resize(&mut fs, inos[f], step % 300);
        if step % 100 == 99 {
            fs.checkpoint().unwrap();
        }
    }
    let written = class(&fs, "ifile") + class(&fs, "inode journal") - start;
    let sizes = sizes(&mut fs, &inos);
    let mut fs = reopen(&mut fs, with_journal(journal));
    assert_eq!(self::sizes(&mut fs, &inos), sizes);
    (written, sizes)
}

/// The point of the journal, counted in blocks (deterministic): the hot
/// inodes' changes are packed, so the inode metadata written falls by more
/// than half against writing every changed inode's IFILE block.
#[test]
fn the_journal_writes_fewer_inode_blocks_than_the_ifile_alone() {
    let (ifile_only, a) = inode_blocks_written(Some(0));
    let (journaled, b) = inode_blocks_written(None);
    assert_eq!(a, b, "the same workload left different inodes");
    eprintln!("inode blocks written: IFILE alone {ifile_only}, with the journal {journaled}");
    assert!(
        journaled * 2 < ifile_only,
        "IFILE alone {ifile_only} blocks, with the journal {journaled}"
    );
}

/// A journal block naming an inode no file can have is refused when the
/// file system opens, naming the block (the record is resealed, as if the
/// engine had written it).
#[test]
fn a_damaged_journal_block_is_refused_naming_it() {
    let mut fs = mkfs(16 * MIB, cfg());
    make_files(&mut fs, 3, |_| b"x".to_vec());
    fs.unmount().unwrap();
    let root = fs.store.ijournal.root;
    assert_ne!(root, 0, "the files' inodes are in the journal");
    // Slot 0's inode number (bytes 88..96) becomes 3, the IFILE's own.
    let img = patch_meta_block(&mut fs, root, 0, |b| {
        b[88..96].copy_from_slice(&3u64.to_le_bytes());
    });
    let e = match Lsfs::open(Box::new(MemDevice::from_bytes(img.clone())), cfg()) {
        Ok(_) => panic!("a damaged journal opened"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("inode journal block 0: slot 0 names inode 3"),
        "{e}"
    );
    let f = fsck_bytes(img).errors.join("\n");
    assert!(f.contains("inode journal block 0"), "{f}");
}
