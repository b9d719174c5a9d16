//! Recovery never needs more space than the live mount left (docs/CRASH.md,
//! promise 1): a run of fsyncs with no checkpoint between them fills the
//! image as far as the writer allows before it must checkpoint, the crash
//! comes right then, and the image mounts again with everything those
//! fsyncs acknowledged, fsck finding it clean. Recovery adopts the records'
//! data blocks where they lie (`fs/replay.rs`); it used to write them all
//! again, and on such an image failed with ENOSPC.

mod common;
use common::*;
use lsfs_core::device::{CrashDevice, MemDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::{Vfs, ROOT_INO};
use std::collections::BTreeMap;

const DEV_BYTES: u64 = 32 * MIB;
const BLOCK: usize = 4096;

/// The default cache, so that only the writer's space checks force a
/// checkpoint between the fsyncs (a small cache checkpoints as soon as
/// half of it is dirty metadata).
/// Defaults, but no checkpoint for the length of the log alone
/// (`log_checkpoint_share`): the runs below go on until the writer needs
/// space, the fullest a crash can leave an image to recover.
fn config() -> MountConfig {
    let mut c = MountConfig::default();
    c.store.log_checkpoint_share = 0;
    c
}

/// A deterministic stream of numbers for the workloads.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn checkpoints(fs: &Lsfs) -> u64 {
    fs.store.stats().checkpoints_by_cause.values().sum()
}

/// On a new image, `setup`, then `step(fs, n)` for n = 0, 1, … (each step
/// ends with an fsync) until one of them makes the writer take a
/// checkpoint, which must be for space. Returns the number of steps done
/// before that one, the image a crash right after the last of them leaves
/// (all of it flushed): the fullest the live mount lets an image get with
/// no checkpoint since the steps began, and the free blocks the live mount
/// counted then.
fn fill_until_the_writer_checkpoints(
    setup: impl FnOnce(&mut Lsfs),
    mut step: impl FnMut(&mut Lsfs, u64),
) -> (u64, MemDevice, u64) {
    let (dev, log) = CrashDevice::new(MemDevice::new(DEV_BYTES));
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts(), config()).expect("mkfs");
    setup(&mut fs);
    let mut durable = log.len();
    let mut free = fs.store.free_blocks();
    let mut n = 0;
    loop {
        let before = checkpoints(&fs);
        step(&mut fs, n);
        if checkpoints(&fs) != before {
            let causes = &fs.store.stats().checkpoints_by_cause;
            assert!(
                causes.keys().any(|c| c.starts_with("space")),
                "step {n} checkpointed, but not for space: {causes:?}"
            );
            return (n, log.image_after(durable), free);
        }
        durable = log.len();
        free = fs.store.free_blocks();
        n += 1;
    }
}

/// Open `img` (recovering it), check `check` on it, unmount and fsck;
/// returns the bytes recovery wrote and the free blocks it left.
fn recover(img: MemDevice, what: &str, check: impl FnOnce(&mut Lsfs)) -> (u64, u64) {
    // fsck rolls the records forward in memory and checks that state: each
    // adopted block's DAT entry against its record's summary, and every
    // segment's live count recounted.
    let rolled = fsck_bytes(img.bytes().to_vec());
    assert_clean(&rolled, &format!("{what}, rolled forward by fsck"));
    let mut fs = Lsfs::open(Box::new(img), config()).unwrap_or_else(|e| {
        panic!("{what}: recovery must fit in the space the live mount left: {e}")
    });
    let wrote = fs.store.device_counters().write_bytes;
    let free = fs.store.free_blocks();
    check(&mut fs);
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), what);
    (wrote, free)
}

/// What recovery used of the space: no more than the live mount's own
/// free-space count had kept for the checkpoint it did not get to write
/// (its dirty blocks count twice there).
#[track_caller]
fn assert_no_more_space_than_live(free_live: u64, free_after: u64) {
    assert!(
        free_after >= free_live,
        "recovery left {free_after} free blocks, the live mount counted {free_live}"
    );
}

fn read_all(fs: &mut Lsfs, name: &[u8]) -> Vec<u8> {
    let a = fs.lookup(ROOT_INO, name).unwrap();
    fs.forget(a.ino, 1);
    fs.read(a.ino, 0, a.size as u32 + 1).unwrap()
}

/// 8 KiB appended to one file and fsynced, over and over: every record's
/// data is new, so recovery writing it again needed as much space as the
/// records hold (found as 2,250 fsyncs leaving 104 free blocks, then
/// ENOSPC at mount). Also crashes recovery itself at each of its device
/// operations and recovers again.
#[test]
fn a_nearly_full_image_recovers_a_long_run_of_appending_fsyncs() {
    let chunk = |n: u64| pattern(n, 2 * BLOCK);
    let ino = std::cell::Cell::new(0);
    let mkfile = |fs: &mut Lsfs| {
        let a = fs
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        ino.set(a.ino);
    };
    let (steps, img, free_live) = fill_until_the_writer_checkpoints(mkfile, |fs, n| {
        fs.write(ino.get(), n * 2 * BLOCK as u64, &chunk(n))
            .unwrap();
        fs.fsync(ino.get(), false).unwrap();
    });
    assert!(
        steps > 2000,
        "the writer checkpointed after {steps} fsyncs of a 32 MiB image"
    );
    let want: Vec<u8> = (0..steps).flat_map(chunk).collect();
    let check = |fs: &mut Lsfs| {
        assert!(read_all(fs, b"f") == want, "the file lost fsynced data");
    };
    let bytes = img.bytes().to_vec();
    let (wrote, free_after) = recover(
        MemDevice::from_bytes(bytes.clone()),
        "the image after the crash",
        check,
    );
    assert_no_more_space_than_live(free_live, free_after);
    // The records hold steps * 2 data blocks; writing them again is what
    // did not fit. Recovery writes metadata only.
    let data_bytes = steps * 2 * BLOCK as u64;
    assert!(
        wrote * 8 < data_bytes,
        "recovery wrote {wrote} bytes for {data_bytes} bytes of fsync'd data"
    );

    // Recovery crashes in turn, after each of its device operations (the
    // writes since the last flush kept or lost at random), and runs again.
    let (dev, log) = CrashDevice::new(MemDevice::from_bytes(bytes));
    drop(Lsfs::open(Box::new(dev), config()).unwrap());
    let ops = log.len();
    assert!(ops > 2, "recovery did {ops} device operations");
    for nops in 1..ops {
        let what = format!("recovery crashed after {nops} of {ops} operations");
        recover(log.crash_image(nops, nops as u64), &what, check);
    }
}

/// One change of the mixed workload, as the model applies it.
#[derive(Clone, Debug)]
enum Change {
    /// Write `len` bytes of `pattern(seed)` at `off`.
    Write {
        name: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        name: String,
        size: u64,
    },
    Punch {
        name: String,
        off: u64,
        len: u64,
    },
    Create {
        name: String,
    },
    Unlink {
        name: String,
    },
    Rename {
        from: String,
        to: String,
    },
}

type Model = BTreeMap<String, Vec<u8>>;

fn apply_model(m: &mut Model, c: &Change) {
    match c {
        Change::Write {
            name,
            off,
            len,
            seed,
        } => {
            let f = m.get_mut(name).unwrap();
            let end = *off as usize + len;
            if f.len() < end {
                f.resize(end, 0);
            }
            f[*off as usize..end].copy_from_slice(&pattern(*seed, *len));
        }
        Change::Truncate { name, size } => m.get_mut(name).unwrap().resize(*size as usize, 0),
        Change::Punch { name, off, len } => {
            let f = m.get_mut(name).unwrap();
            let end = ((off + len) as usize).min(f.len());
            if (*off as usize) < end {
                f[*off as usize..end].fill(0);
            }
        }
        Change::Create { name } => {
            m.insert(name.clone(), Vec::new());
        }
        Change::Unlink { name } => {
            m.remove(name);
        }
        Change::Rename { from, to } => {
            let f = m.remove(from).unwrap();
            m.insert(to.clone(), f);
        }
    }
}

fn apply_fs(fs: &mut Lsfs, c: &Change) {
    let ino = |fs: &mut Lsfs, name: &str| {
        let a = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
        fs.forget(a.ino, 1);
        a.ino
    };
    let touched = match c {
        Change::Write {
            name,
            off,
            len,
            seed,
        } => {
            let i = ino(fs, name);
            fs.write(i, *off, &pattern(*seed, *len)).unwrap();
            i
        }
        Change::Truncate { name, size } => {
            let i = ino(fs, name);
            let set = lsfs_vfs::SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            fs.setattr(i, &set).unwrap();
            i
        }
        Change::Punch { name, off, len } => {
            let i = ino(fs, name);
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            fs.fallocate(i, *off, *len, mode).unwrap();
            i
        }
        Change::Create { name } => {
            let a = fs
                .mknod(ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0, &ctx())
                .unwrap();
            fs.forget(a.ino, 1);
            a.ino
        }
        Change::Unlink { name } => {
            fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
            ROOT_INO
        }
        Change::Rename { from, to } => {
            fs.rename(ROOT_INO, from.as_bytes(), ROOT_INO, to.as_bytes(), 0)
                .unwrap();
            ROOT_INO
        }
    };
    // Every fsync makes every namespace change before it durable too.
    fs.fsync(touched, false).unwrap();
}

/// A random next change for model `m` (files of up to 64 blocks).
fn next_change(rng: &mut Lcg, m: &Model, n: u64) -> Change {
    let names: Vec<&String> = m.keys().collect();
    let pick = |rng: &mut Lcg| names[rng.below(names.len() as u64) as usize].clone();
    let r = rng.below(100);
    if names.len() < 4 || (r < 4 && names.len() < 40) {
        return Change::Create {
            name: format!("f{n}"),
        };
    }
    let name = pick(rng);
    let size = m[&name].len() as u64;
    match r {
        // Many blocks at once: the fsync writes them as data-stream records.
        0..=19 => Change::Write {
            name,
            off: rng.below(32) * BLOCK as u64,
            len: (8 + rng.below(24) as usize) * BLOCK,
            seed: n,
        },
        // The same few blocks again: rewritten in place, adopted again.
        20..=69 => Change::Write {
            name,
            off: rng.below(4) * BLOCK as u64 + rng.below(100),
            len: 1 + rng.below(2 * BLOCK as u64) as usize,
            seed: n,
        },
        70..=79 => Change::Truncate {
            name,
            size: rng.below(size + 1),
        },
        80..=89 => Change::Punch {
            name,
            off: rng.below(size + 1),
            len: 1 + rng.below(8 * BLOCK as u64),
        },
        90..=94 => Change::Unlink { name },
        _ => Change::Rename {
            from: name,
            to: format!("r{n}"),
        },
    }
}

/// Writes large and small, in place and not, truncations, punched holes,
/// creates, unlinks and renames, each fsynced, until the writer has to
/// checkpoint for space; the crash comes just before.
#[test]
fn a_nearly_full_image_recovers_a_long_run_of_mixed_fsyncs() {
    // A big file first, checkpointed: the run's writes fill what is left.
    let big = pattern(99, 4000 * BLOCK);
    let mut rng = Lcg(11);
    let mut model = Model::new();
    let mut changes = Vec::new();
    let setup = |fs: &mut Lsfs| {
        let a = fs
            .mknod(ROOT_INO, b"big", libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap();
        for (i, c) in big.chunks(64 * BLOCK).enumerate() {
            fs.write(a.ino, (i * 64 * BLOCK) as u64, c).unwrap();
        }
        fs.forget(a.ino, 1);
        fs.sync().unwrap();
    };
    let (steps, img, free_live) = fill_until_the_writer_checkpoints(setup, |fs, n| {
        let c = next_change(&mut rng, &model, n);
        apply_model(&mut model, &c);
        apply_fs(fs, &c);
        changes.push(c);
    });
    assert!(steps > 300, "the writer checkpointed after {steps} steps");
    // The model as of the last step before the one that checkpointed.
    let mut want = Model::new();
    for c in &changes[..steps as usize] {
        apply_model(&mut want, c);
    }
    let (wrote, free_after) = recover(img, "the image after the crash", |fs| {
        assert!(read_all(fs, b"big") == big, "the checkpointed file changed");
        for (name, data) in &want {
            let got = read_all(fs, name.as_bytes());
            assert_eq!(got.len(), data.len(), "size of {name}");
            assert!(&got == data, "contents of {name}");
        }
        let mut names: Vec<Vec<u8>> = fs
            .readdir(ROOT_INO, 0, 1000)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        names.sort();
        let mut expect: Vec<Vec<u8>> = want.keys().map(|k| k.clone().into_bytes()).collect();
        expect.push(b"big".to_vec());
        expect.sort();
        assert_eq!(names, expect, "the namespace");
    });
    // What the run's files hold; recovery writing its blocks again would
    // write what of it changed since the checkpoint (most of it).
    let held: u64 = want.values().map(|f| f.len().div_ceil(BLOCK) as u64).sum();
    assert_no_more_space_than_live(free_live, free_after);
    let wrote_blocks = wrote / BLOCK as u64;
    assert!(
        wrote_blocks * 4 < held,
        "recovery wrote {wrote_blocks} blocks, the files hold {held}"
    );
}
