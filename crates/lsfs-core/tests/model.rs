//! Model-based randomized test: random operation sequences run on lsfs and on
//! the in-memory reference `MemFs`, and both must agree on every result
//! (errno values, kinds, sizes, link counts, names, contents, xattrs).
//! Along the way lsfs is checkpointed, unmounted and reopened (fsck must be
//! clean each time), and older checkpoints are opened read-only and compared
//! with what the model looked like when they were taken. After each fsync
//! (of any file or directory, also right after creating or renaming it), a
//! copy of the image is recovered: its whole namespace (every path, kind
//! and link count) and the fsync'd inode must be the model's.
//!
//! Cases default to 24 (under a minute); `PROPTEST_CASES=500` runs more.

mod common;
use common::*;
use lsfs_core::device::MemDevice;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_vfs::model::MemFs;
use lsfs_vfs::{
    Errno, FileKind, Ino, SetAttr, Vfs, VfsResult, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
    FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO, XATTR_CREATE, XATTR_REPLACE,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

const DEV_BYTES: u64 = 64 * MIB;
/// Contents are compared on these windows at each end of a file, so that
/// files with data at far offsets stay cheap to compare.
const WINDOW: u64 = 64 * 1024;

/// A path of one to three components from a small alphabet, so that
/// operations often hit existing names, directories and each other.
type Path = Vec<u8>;

#[derive(Clone, Debug)]
enum Op {
    Create(Path),
    Mkdir(Path),
    Write {
        path: Path,
        off: u64,
        len: usize,
        seed: u64,
    },
    Truncate(Path, u64),
    Unlink(Path),
    Rmdir(Path),
    Rename(Path, Path, u32),
    Link(Path, Path),
    Symlink(Path, usize),
    SetXattr {
        path: Path,
        name: u8,
        len: usize,
        flags: i32,
    },
    RemoveXattr(Path, u8),
    Fsync(Path),
    Chmod(Path, u32),
    /// fallocate with a mode: 0, KEEP_SIZE, a punch, a zero range (± KEEP_SIZE), or
    /// a word both refuse.
    Fallocate(Path, u64, u64, i32),
    /// List a directory a few entries at a time, resuming from cookies.
    ReaddirPaged(Path, usize),
    /// copy_file_range of `len` bytes from `from` at `off_in` to `to` at
    /// `off_out`, going on after short counts (lsfs shares whole blocks
    /// when the offsets sit alike in their blocks, the model copies).
    CopyRange {
        from: Path,
        to: Path,
        off_in: u64,
        off_out: u64,
        len: u64,
    },
    /// Open a file and keep it open (unlinking it then makes an orphan).
    Open(Path),
    /// Read through, then release, an open handle.
    ReadHandle(usize),
    /// Give an open (maybe unlinked) file a new name.
    LinkHandle(usize, Path),
    /// Create a file in an open (maybe removed) directory.
    CreateInHandle(usize, u8),
    Release(usize),
    /// Create a file of 0.3 to 2.5 MB (deleting it is left to the
    /// background, `fs/delete.rs`).
    BigFile(Path, usize, u64),
    /// Free up to this many blocks of files deleted in the background:
    /// changes nothing users see.
    Reclaim(u64),
    Checkpoint,
    /// A cleaner pass: relocates live blocks, changes nothing users see.
    Clean(bool),
    Snapshot,
    /// Demote a snapshot taken earlier to a plain checkpoint.
    Demote(usize),
    Remount,
    /// sync, then a power cut: the recovered file system is the model.
    SyncCrash,
    /// fsync one file, then look at a recovered copy of the image: that
    /// file and every name are what the model says, whatever else happened.
    FsyncPeek(Path),
    /// Create a file, write it, then as `FsyncPeek`.
    CreateFsync {
        path: Path,
        len: usize,
        seed: u64,
    },
    /// Rename, then as `FsyncPeek` of the new name (or of its directory).
    RenameFsync {
        from: Path,
        to: Path,
        dir: bool,
    },
    OpenOld(usize),
    /// Create a file and write `len` bytes, maybe checkpoint (so that the
    /// blocks are on disk, not fresh), fallocate inside what was written
    /// (`off` and `flen` taken modulo `len`), then maybe as `FsyncPeek`.
    FallocWritten {
        path: Path,
        len: usize,
        seed: u64,
        checkpoint: bool,
        off: u64,
        flen: u64,
        mode: i32,
        fsync: bool,
    },
}

fn path() -> impl Strategy<Value = Path> {
    prop::collection::vec(0u8..4, 1..=3)
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20_000,
        2 => 380u64..400, // around the inline-data limit
        2 => (1u64 << 20)..(1 << 20) + 10_000,
        1 => (1u64 << 33)..(1 << 33) + 10_000, // sparse, far away
    ]
}

fn falloc_mode() -> impl Strategy<Value = i32> {
    let keep = FALLOC_FL_KEEP_SIZE;
    prop_oneof![
        2 => Just(0),
        1 => Just(keep),
        4 => Just(FALLOC_FL_PUNCH_HOLE | keep),
        2 => Just(FALLOC_FL_ZERO_RANGE),
        2 => Just(FALLOC_FL_ZERO_RANGE | keep),
        // Refused: punch without KEEP_SIZE, collapse.
        1 => Just(FALLOC_FL_PUNCH_HOLE),
        1 => Just(libc::FALLOC_FL_COLLAPSE_RANGE),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => path().prop_map(Op::Create),
        4 => path().prop_map(Op::Mkdir),
        10 => (path(), offset(), prop_oneof![9 => 1usize..20_000, 1 => 200_000usize..600_000], any::<u64>())
            .prop_map(|(path, off, len, seed)| Op::Write { path, off, len, seed }),
        3 => (path(), prop_oneof![0u64..10_000, 380u64..400, (1u64 << 20)..(1 << 20) + 9000])
            .prop_map(|(p, s)| Op::Truncate(p, s)),
        4 => path().prop_map(Op::Unlink),
        3 => path().prop_map(Op::Rmdir),
        5 => (path(), path(), prop_oneof![Just(0), Just(RENAME_NOREPLACE), Just(RENAME_EXCHANGE)])
            .prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        3 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (path(), prop_oneof![1usize..50, 380usize..400, 1000usize..4096])
            .prop_map(|(p, n)| Op::Symlink(p, n)),
        3 => (path(), 0u8..3, 0usize..1200, prop_oneof![Just(0), Just(XATTR_CREATE), Just(XATTR_REPLACE)])
            .prop_map(|(path, name, len, flags)| Op::SetXattr { path, name, len, flags }),
        2 => (path(), 0u8..3).prop_map(|(p, n)| Op::RemoveXattr(p, n)),
        3 => path().prop_map(Op::Fsync),
        1 => (path(), 0u32..0o7777).prop_map(|(p, m)| Op::Chmod(p, m)),
        4 => (path(), offset(), prop_oneof![3 => 0u64..12_000, 1 => 0u64..300_000], falloc_mode()).prop_map(|(p, o, l, m)| Op::Fallocate(p, o, l, m)),
        2 => (prop::collection::vec(0u8..4, 0..=2), 1usize..4).prop_map(|(p, n)| Op::ReaddirPaged(p, n)),
        3 => (path(), path(), copy_offsets(), prop_oneof![1 => 1u64..20_000, 2 => 262_144u64..2_000_000])
            .prop_map(|(from, to, (off_in, off_out), len)| Op::CopyRange { from, to, off_in, off_out, len }),
        2 => path().prop_map(Op::Open),
        2 => (0usize..4).prop_map(Op::ReadHandle),
        2 => (0usize..4).prop_map(Op::Release),
        1 => (0usize..4, path()).prop_map(|(i, p)| Op::LinkHandle(i, p)),
        1 => (0usize..4, 0u8..4).prop_map(|(i, n)| Op::CreateInHandle(i, n)),
        2 => Just(Op::Checkpoint),
        2 => (path(), 300_000usize..2_500_000, any::<u64>()).prop_map(|(p, n, s)| Op::BigFile(p, n, s)),
        2 => prop_oneof![1u64..100, 100u64..3000].prop_map(Op::Reclaim),
        1 => Just(Op::Snapshot),
        2 => any::<bool>().prop_map(Op::Clean),
        1 => (0usize..4).prop_map(Op::Demote),
        1 => Just(Op::Remount),
        1 => Just(Op::SyncCrash),
        2 => path().prop_map(Op::FsyncPeek),
        2 => (path(), prop_oneof![1usize..300, 3000usize..20_000], any::<u64>())
            .prop_map(|(path, len, seed)| Op::CreateFsync { path, len, seed }),
        2 => (path(), path(), any::<bool>()).prop_map(|(from, to, dir)| Op::RenameFsync { from, to, dir }),
        1 => (0usize..8).prop_map(Op::OpenOld),
        3 => (
            (path(), prop_oneof![1usize..300, 3000usize..200_000], any::<u64>(), any::<bool>()),
            (any::<u64>(), any::<u64>(), falloc_mode(), any::<bool>()),
        )
            .prop_map(|((path, len, seed, checkpoint), (off, flen, mode, fsync))| Op::FallocWritten {
                path,
                len,
                seed,
                checkpoint,
                off,
                flen,
                mode,
                fsync,
            }),
    ]
}

/// Offsets for `CopyRange`: mostly at the same place in their blocks (the
/// whole blocks between are shared), sometimes anywhere.
fn copy_offsets() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        3 => (0u64..64, 0u64..600, 0u64..4096).prop_map(|(a, b, r)| (a * 4096 + r, b * 4096 + r)),
        1 => (0u64..300_000, 0u64..300_000),
    ]
}

fn comp(c: u8) -> Vec<u8> {
    vec![b'a' + c]
}

/// Look up the parent of `p` from the root; the lookup references taken on
/// the way are given back, like the kernel does when it drops dentries.
fn parent(fs: &mut dyn Vfs, p: &Path) -> VfsResult<Ino> {
    let mut cur = ROOT_INO;
    for &c in &p[..p.len() - 1] {
        let a = fs.lookup(cur, &comp(c))?;
        fs.forget(a.ino, 1);
        if a.kind != FileKind::Dir {
            return Err(Errno::NOTDIR);
        }
        cur = a.ino;
    }
    Ok(cur)
}

fn resolve(fs: &mut dyn Vfs, p: &Path) -> VfsResult<Ino> {
    let d = parent(fs, p)?;
    let a = fs.lookup(d, &comp(*p.last().unwrap()))?;
    fs.forget(a.ino, 1);
    Ok(a.ino)
}

fn attr_summary(a: &lsfs_vfs::Attr) -> String {
    let size = if a.kind == FileKind::Dir { 0 } else { a.size };
    format!(
        "{:?} size {size} nlink {} perm {:o}",
        a.kind, a.nlink, a.perm
    )
}

/// Run one operation on one file system; the outcome is what a user sees.
fn apply(fs: &mut dyn Vfs, op: &Op) -> VfsResult<String> {
    let c = ctx();
    match op {
        Op::Create(p) => {
            let d = parent(fs, p)?;
            let a = fs.mknod(d, &comp(*p.last().unwrap()), libc::S_IFREG | 0o644, 0, &c)?;
            fs.forget(a.ino, 1);
            Ok(attr_summary(&a))
        }
        Op::Mkdir(p) => {
            let d = parent(fs, p)?;
            let a = fs.mkdir(d, &comp(*p.last().unwrap()), 0o755, &c)?;
            fs.forget(a.ino, 1);
            Ok(attr_summary(&a))
        }
        Op::Write {
            path,
            off,
            len,
            seed,
        } => {
            let ino = resolve(fs, path)?;
            let data = pattern(*seed, *len);
            let n = fs.write(ino, *off, &data)?;
            // Read back what was written, and a little around it.
            let from = off.saturating_sub(100);
            let back = fs.read(ino, from, *len as u32 + 200)?;
            let a = fs.getattr(ino)?;
            Ok(format!("{n} {} {:x}", attr_summary(&a), hash(&back)))
        }
        Op::Truncate(p, size) => {
            let ino = resolve(fs, p)?;
            let a = fs.setattr(
                ino,
                &SetAttr {
                    size: Some(*size),
                    ..SetAttr::default()
                },
            )?;
            Ok(attr_summary(&a))
        }
        Op::Unlink(p) => {
            let d = parent(fs, p)?;
            fs.unlink(d, &comp(*p.last().unwrap()))
                .map(|_| String::new())
        }
        Op::Rmdir(p) => {
            let d = parent(fs, p)?;
            fs.rmdir(d, &comp(*p.last().unwrap()))
                .map(|_| String::new())
        }
        Op::Rename(a, b, flags) => {
            let da = parent(fs, a)?;
            let db = parent(fs, b)?;
            fs.rename(
                da,
                &comp(*a.last().unwrap()),
                db,
                &comp(*b.last().unwrap()),
                *flags,
            )
            .map(|_| String::new())
        }
        Op::Link(a, b) => {
            let ino = resolve(fs, a)?;
            let db = parent(fs, b)?;
            let at = fs.link(ino, db, &comp(*b.last().unwrap()))?;
            fs.forget(at.ino, 1);
            Ok(attr_summary(&at))
        }
        Op::Symlink(p, n) => {
            let d = parent(fs, p)?;
            let target: Vec<u8> = (0..*n).map(|i| b'a' + (i % 26) as u8).collect();
            let a = fs.symlink(d, &comp(*p.last().unwrap()), &target, &c)?;
            fs.forget(a.ino, 1);
            Ok(attr_summary(&a))
        }
        Op::SetXattr {
            path,
            name,
            len,
            flags,
        } => {
            let ino = resolve(fs, path)?;
            let value = pattern(*name as u64 + *len as u64, *len);
            fs.setxattr(ino, &xname(*name), &value, *flags)
                .map(|_| String::new())
        }
        Op::RemoveXattr(p, name) => {
            let ino = resolve(fs, p)?;
            fs.removexattr(ino, &xname(*name)).map(|_| String::new())
        }
        Op::Fsync(p) => {
            let ino = resolve(fs, p)?;
            fs.fsync(ino, false).map(|_| String::new())
        }
        Op::Chmod(p, mode) => {
            let ino = resolve(fs, p)?;
            let a = fs.setattr(
                ino,
                &SetAttr {
                    mode: Some(*mode),
                    ..SetAttr::default()
                },
            )?;
            Ok(attr_summary(&a))
        }
        Op::Fallocate(p, off, len, mode) => {
            let ino = resolve(fs, p)?;
            fs.fallocate(ino, *off, *len, *mode)?;
            let a = fs.getattr(ino)?;
            // Around both ends of the range: a punch or zero changes the
            // blocks there in part.
            let mut back = fs.read(ino, off.saturating_sub(10), 20_000)?;
            back.extend(fs.read(ino, (off + len).saturating_sub(10_000), 20_000)?);
            Ok(format!("{} {:x}", attr_summary(&a), hash(&back)))
        }
        Op::CopyRange {
            from,
            to,
            off_in,
            off_out,
            len,
        } => {
            let (a, b) = (resolve(fs, from)?, resolve(fs, to)?);
            let mut done = 0;
            while done < *len {
                let n = fs.copy_file_range(a, off_in + done, b, off_out + done, len - done)?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            let at = fs.getattr(b)?;
            let back = fs.read(b, off_out.saturating_sub(10), (done + 20) as u32)?;
            Ok(format!("{done} {} {:x}", attr_summary(&at), hash(&back)))
        }
        Op::ReaddirPaged(p, n) => {
            let d = if p.is_empty() {
                ROOT_INO
            } else {
                resolve(fs, p)?
            };
            let mut names = Vec::new();
            let mut cookie = 0;
            loop {
                let page = fs.readdir(d, cookie, *n)?;
                let Some(last) = page.last() else { break };
                cookie = last.offset;
                names.extend(page.into_iter().map(|e| e.name));
                assert!(names.len() < 10_000, "readdir does not end");
            }
            let total = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), total, "readdir repeated a name");
            Ok(format!("{names:?}"))
        }
        _ => unreachable!("handled by the driver"),
    }
}

fn xname(n: u8) -> Vec<u8> {
    format!("user.x{n}").into_bytes()
}

fn hash(b: &[u8]) -> u64 {
    // FNV-1a: enough to tell contents apart in a message.
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

/// Everything a user can see of a tree, by path.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    attr: String,
    /// Head and tail windows of a file, or a symlink's target.
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn dump(fs: &mut dyn Vfs) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let ents = fs.readdir(d, 0, usize::MAX).expect("readdir");
        for e in ents {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let a = fs.lookup(d, &e.name).expect("lookup of a listed name");
            fs.forget(a.ino, 1);
            assert_eq!(a.kind, e.kind, "readdir kind of {prefix}/{:?}", e.name);
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            let data = match a.kind {
                FileKind::File => {
                    let mut v = fs.read(a.ino, 0, WINDOW as u32).expect("read head");
                    if a.size > WINDOW {
                        let from = (a.size - WINDOW).max(WINDOW);
                        v.extend(fs.read(a.ino, from, WINDOW as u32).expect("read tail"));
                    }
                    v
                }
                FileKind::Symlink => fs.readlink(a.ino).expect("readlink"),
                _ => Vec::new(),
            };
            let mut xattrs = BTreeMap::new();
            for n in fs.listxattr(a.ino).expect("listxattr") {
                let v = fs.getxattr(a.ino, &n).expect("getxattr of a listed name");
                xattrs.insert(n, v);
            }
            if a.kind == FileKind::Dir {
                stack.push((a.ino, path.clone()));
            }
            out.insert(
                path,
                Seen {
                    attr: attr_summary(&a),
                    data,
                    xattrs,
                },
            );
        }
    }
    out
}

fn compare_dumps(what: &str, got: &BTreeMap<String, Seen>, want: &BTreeMap<String, Seen>) {
    let gk: Vec<_> = got.keys().collect();
    let wk: Vec<_> = want.keys().collect();
    assert!(
        gk == wk,
        "{what}: names differ:\n lsfs  {gk:?}\n model {wk:?}"
    );
    for (k, w) in want {
        let g = &got[k];
        assert!(
            g.attr == w.attr,
            "{what}: {k}: lsfs {} model {}",
            g.attr,
            w.attr
        );
        assert!(
            g.data == w.data,
            "{what}: {k}: contents differ ({} bytes vs {}, first difference at {:?})",
            g.data.len(),
            w.data.len(),
            g.data.iter().zip(&w.data).position(|(a, b)| a != b)
        );
        assert!(
            g.xattrs == w.xattrs,
            "{what}: {k}: xattrs differ: lsfs {:?} model {:?}",
            g.xattrs.keys().collect::<Vec<_>>(),
            w.xattrs.keys().collect::<Vec<_>>()
        );
    }
}

/// Every path with its kind and link count: what an fsync makes durable
/// of the namespace.
fn names(fs: &mut dyn Vfs) -> BTreeMap<String, String> {
    dump(fs)
        .into_iter()
        .map(|(p, s)| {
            let kind_nlink = s.attr.split(" size ").next().unwrap().to_string();
            let nlink = s
                .attr
                .split(" nlink ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            (p, format!("{kind_nlink} nlink {nlink}"))
        })
        .collect()
}

/// fsync `p` (the root if empty) on both, then recover a copy of lsfs's
/// image in memory (read-only: replay is not written): the fsync'd inode
/// and the whole namespace must be the model's.
fn fsync_peek(fs: &mut Lsfs, model: &mut MemFs, config: &MountConfig, p: &Path, what: &str) {
    let find = |v: &mut dyn Vfs| {
        if p.is_empty() {
            Ok(ROOT_INO)
        } else {
            resolve(v, p)
        }
    };
    let got = find(fs).and_then(|i| fs.fsync(i, false));
    let want = find(model).and_then(|i| model.fsync(i, false));
    assert!(got == want, "{what}: lsfs {got:?} model {want:?}");
    if got.is_err() {
        return;
    }
    let mut c = config.clone();
    c.store.read_only = true;
    let mut copy = Lsfs::open(Box::new(MemDevice::from_bytes(image(fs))), c)
        .unwrap_or_else(|e| panic!("{what}: recover a copy: {e}"));
    let seen = |v: &mut dyn Vfs| -> VfsResult<(String, u64)> {
        let ino = find(v)?;
        let a = v.getattr(ino)?;
        let data = match a.kind {
            FileKind::File => v.read(ino, 0, 1 << 20)?,
            FileKind::Symlink => v.readlink(ino)?,
            _ => Vec::new(),
        };
        Ok((attr_summary(&a), hash(&data)))
    };
    let got = seen(&mut copy);
    let want = seen(model);
    assert!(
        got == want,
        "{what}: after a crash lsfs {got:?} model {want:?}"
    );
    let (got, want) = (names(&mut copy), names(model));
    assert!(
        got == want,
        "{what}: names after a crash:\n lsfs  {got:?}\n model {want:?}"
    );
}

fn model_cfg() -> MountConfig {
    cfg()
}

fn run(ops: &[Op], expire: bool) {
    let config = if expire {
        cfg_no_protection()
    } else {
        model_cfg()
    };
    let mut fs = mkfs(DEV_BYTES, config.clone());
    let clock0 = lsfs_core::meta::store::wall_secs();
    let mut model = MemFs::new();
    // (checkpoint number, what the model looked like then)
    let mut history: Vec<(u64, BTreeMap<String, Seen>)> = Vec::new();
    // Open handles: (lsfs inode, model inode).
    let mut handles: Vec<(Ino, Ino)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let what = format!("step {step} {op:?}");
        if expire {
            // Each step a second later: plain checkpoints expire and reclaim
            // frees segments, while snapshots stay.
            fs.clock().set_secs(clock0 + step as u64);
        }
        match op {
            Op::Checkpoint | Op::Snapshot => {
                let cno = if matches!(op, Op::Snapshot) {
                    fs.snapshot_create()
                } else {
                    fs.checkpoint()
                }
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                let d = dump(&mut model);
                compare_dumps(&what, &dump(&mut fs), &d);
                history.push((cno, d));
            }
            Op::BigFile(path, len, seed) => {
                create_and_write(&mut fs, &mut model, path, *len, *seed, &what)
            }
            Op::Reclaim(n) => {
                let before = fs.reclaim_status();
                let p = fs
                    .reclaim_step(*n)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    before.blocks - p.freed_blocks,
                    p.left.blocks,
                    "{what}: {p:?}"
                );
                assert!(p.freed_blocks <= *n, "{what}: {p:?}");
                RECLAIMED.fetch_add(p.freed_blocks, std::sync::atomic::Ordering::Relaxed);
                fs.check_delete_queue();
                if step % 2 == 0 {
                    compare_dumps(&what, &dump(&mut fs), &dump(&mut model));
                }
            }
            Op::Clean(pressed) => {
                let reason = if *pressed { "foreground" } else { "background" };
                let r = fs
                    .clean(4, reason)
                    .unwrap_or_else(|e| panic!("{what}: clean: {e}"));
                COPIED.fetch_add(r.blocks_copied, std::sync::atomic::Ordering::Relaxed);
                if step % 4 == 0 {
                    compare_dumps(&what, &dump(&mut fs), &dump(&mut model));
                }
            }
            Op::Demote(i) => {
                let snaps: Vec<u64> = fs
                    .checkpoints()
                    .iter()
                    .filter(|c| c.is_snapshot())
                    .map(|c| c.cno)
                    .collect();
                if !snaps.is_empty() {
                    let cno = snaps[i % snaps.len()];
                    fs.snapshot_set(cno, false)
                        .unwrap_or_else(|e| panic!("{what}: demote {cno}: {e}"));
                }
            }
            Op::Open(p) => {
                let got = resolve(&mut fs, p).and_then(|i| fs.open(i, 0).map(|_| i));
                let want = resolve(&mut model, p).and_then(|i| model.open(i, 0).map(|_| i));
                assert!(
                    got.is_ok() == want.is_ok(),
                    "{what}: lsfs {got:?} model {want:?}"
                );
                if let (Ok(a), Ok(b)) = (got, want) {
                    handles.push((a, b));
                }
            }
            Op::LinkHandle(i, p) => {
                if handles.is_empty() {
                    continue;
                }
                let (a, b) = handles[i % handles.len()];
                let name = comp(*p.last().unwrap());
                let got = parent(&mut fs, p).and_then(|d| fs.link(a, d, &name));
                let want = parent(&mut model, p).and_then(|d| model.link(b, d, &name));
                let got = got.map(|x| {
                    fs.forget(x.ino, 1);
                    attr_summary(&x)
                });
                let want = want.map(|x| {
                    model.forget(x.ino, 1);
                    attr_summary(&x)
                });
                assert!(got == want, "{what}: lsfs {got:?} model {want:?}");
            }
            Op::CreateInHandle(i, n) => {
                if handles.is_empty() {
                    continue;
                }
                let (a, b) = handles[i % handles.len()];
                let c = ctx();
                let got = fs
                    .mknod(a, &comp(*n), libc::S_IFREG | 0o644, 0, &c)
                    .map(|x| {
                        fs.forget(x.ino, 1);
                        attr_summary(&x)
                    });
                let want = model
                    .mknod(b, &comp(*n), libc::S_IFREG | 0o644, 0, &c)
                    .map(|x| {
                        model.forget(x.ino, 1);
                        attr_summary(&x)
                    });
                assert!(got == want, "{what}: lsfs {got:?} model {want:?}");
            }
            Op::ReadHandle(i) | Op::Release(i) => {
                if handles.is_empty() {
                    continue;
                }
                let k = i % handles.len();
                let (a, b) = handles[k];
                let got = fs.read(a, 0, 1 << 20).map(|v| hash(&v));
                let want = model.read(b, 0, 1 << 20).map(|v| hash(&v));
                assert!(
                    got == want,
                    "{what}: read through handle: lsfs {got:?} model {want:?}"
                );
                if matches!(op, Op::Release(_)) {
                    fs.release(a);
                    model.release(b);
                    handles.swap_remove(k);
                }
            }
            Op::Remount => {
                // Unmounting closes every file.
                for (a, b) in handles.drain(..) {
                    fs.release(a);
                    model.release(b);
                }
                fs.unmount().unwrap_or_else(|e| panic!("{what}: {e}"));
                let bytes = image(&mut fs);
                drop(fs);
                assert_clean(&fsck_bytes(bytes.clone()), &what);
                fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), config.clone())
                    .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                compare_dumps(&what, &dump(&mut fs), &dump(&mut model));
            }
            Op::SyncCrash => {
                fs.sync().unwrap_or_else(|e| panic!("{what}: {e}"));
                let bytes = image(&mut fs);
                drop(fs); // no unmount, files still open
                assert_clean(&fsck_bytes(bytes.clone()), &what);
                fs = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), config.clone())
                    .unwrap_or_else(|e| panic!("{what}: recover: {e}"));
                // The crash closed every file: unlinked ones are gone now.
                for (_, b) in handles.drain(..) {
                    model.release(b);
                }
                compare_dumps(&what, &dump(&mut fs), &dump(&mut model));
                // Recovery deleted the orphans, or queued them for the
                // background, without leaking their blocks.
                fs.check_delete_queue();
                fs.reclaim_all().unwrap_or_else(|e| panic!("{what}: {e}"));
                fs.sync().unwrap_or_else(|e| panic!("{what}: {e}"));
                let r = fsck_bytes(image(&mut fs));
                assert_clean(&r, &format!("{what}, after recovery"));
                assert_eq!(r.stats.orphans, 0, "{what}: orphans left after recovery");
            }
            Op::FsyncPeek(p) => fsync_peek(&mut fs, &mut model, &config, p, &what),
            Op::CreateFsync { path, len, seed } => {
                create_and_write(&mut fs, &mut model, path, *len, *seed, &what);
                fsync_peek(&mut fs, &mut model, &config, path, &what);
            }
            Op::FallocWritten {
                path,
                len,
                seed,
                checkpoint,
                off,
                flen,
                mode,
                fsync,
            } => {
                let n = *len as u64;
                let ops = [
                    Op::Create(path.clone()),
                    Op::Write {
                        path: path.clone(),
                        off: 0,
                        len: *len,
                        seed: *seed,
                    },
                    Op::Fallocate(path.clone(), off % n, 1 + flen % n, *mode),
                ];
                for (i, op) in ops.iter().enumerate() {
                    if i == 2 && *checkpoint {
                        fs.checkpoint().unwrap_or_else(|e| panic!("{what}: {e}"));
                    }
                    let got = apply(&mut fs, op);
                    let want = apply(&mut model, op);
                    assert!(got == want, "{what}: {op:?}: lsfs {got:?} model {want:?}");
                }
                if *fsync {
                    fsync_peek(&mut fs, &mut model, &config, path, &what);
                }
            }
            Op::RenameFsync { from, to, dir } => {
                let op = Op::Rename(from.clone(), to.clone(), 0);
                let got = apply(&mut fs, &op);
                let want = apply(&mut model, &op);
                assert!(got == want, "{what}: lsfs {got:?} model {want:?}");
                let target = if *dir {
                    to[..to.len() - 1].to_vec()
                } else {
                    to.clone()
                };
                fsync_peek(&mut fs, &mut model, &config, &target, &what);
            }
            Op::OpenOld(i) => {
                if history.is_empty() {
                    continue;
                }
                // Expired checkpoints are gone; forget them.
                history.retain(|(c, _)| fs.store.cps().entries.contains_key(c));
                if history.is_empty() {
                    continue;
                }
                let (cno, want) = &history[i % history.len()];
                // The image as it is now, fsync records after the last
                // checkpoint included: an old checkpoint must not see them.
                let bytes = image(&mut fs);
                let mut c = model_cfg();
                c.checkpoint = Some(*cno);
                c.store.read_only = true;
                let mut old = Lsfs::open(Box::new(MemDevice::from_bytes(bytes)), c)
                    .unwrap_or_else(|e| panic!("{what}: open checkpoint {cno}: {e}"));
                compare_dumps(&format!("{what} (checkpoint {cno})"), &dump(&mut old), want);
                assert_eq!(
                    old.mknod(ROOT_INO, b"new", libc::S_IFREG, 0, &ctx())
                        .map(|_| ()),
                    Err(Errno::ROFS),
                    "{what}: an old checkpoint must be read-only"
                );
            }
            _ => {
                let got = apply(&mut fs, op);
                let want = apply(&mut model, op);
                assert!(got == want, "{what}: lsfs {got:?} model {want:?}");
                if matches!(op, Op::CopyRange { .. }) && fs.store.clones_enabled() {
                    SHARED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if step % 8 == 7 {
                    compare_dumps(&what, &dump(&mut fs), &dump(&mut model));
                }
            }
        }
    }
    compare_dumps("at the end", &dump(&mut fs), &dump(&mut model));
    // Open handles keep unlinked files as orphans: check with them still open.
    fs.checkpoint().unwrap();
    assert_clean(
        &fsck_bytes(image(&mut fs)),
        "the image with files still open",
    );
    fs.unmount().unwrap();
    assert_clean(&fsck_bytes(image(&mut fs)), "the final image");
}

/// Blocks `Reclaim` steps freed over all cases.
static RECLAIMED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// CopyRange steps on an image where some copy shared blocks.
static SHARED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Blocks the cleaner copied over all cases (the test checks it did work).
static COPIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn lsfs_agrees_with_the_model(ops in prop::collection::vec(op(), 1..120), expire in any::<bool>()) {
        run(&ops, expire);
    }
}

/// The cleaner copies blocks in these workloads (else Clean steps test nothing).
#[test]
fn cleaner_moves_blocks_under_the_model() {
    // Overwrites across checkpoints leave segments partly dead: victims.
    let mut ops: Vec<Op> = (0..3u8).map(|c| Op::Create(vec![c])).collect();
    for i in 0..40u64 {
        ops.push(Op::Write {
            path: vec![(i % 3) as u8],
            off: (i % 7) * 40_000,
            len: 30_000,
            seed: i,
        });
        if i % 5 == 4 {
            ops.push(Op::Checkpoint);
        }
    }
    ops.push(Op::Snapshot);
    ops.push(Op::Unlink(vec![1]));
    ops.extend([
        Op::Clean(true),
        Op::Clean(false),
        Op::Clean(true),
        Op::Remount,
    ]);
    let before = COPIED.load(std::sync::atomic::Ordering::Relaxed);
    run(&ops, true);
    assert!(
        COPIED.load(std::sync::atomic::Ordering::Relaxed) > before,
        "the cleaner copied nothing"
    );
}

/// Files that share blocks (copy_file_range of whole blocks), written,
/// truncated, punched, snapshotted, cleaned, deleted in the background,
/// remounted and cut by crashes, stay what the model (which copies) says.
#[test]
fn shared_blocks_under_the_model() {
    let copy = |from: u8, to: u8, off_in: u64, off_out: u64, len: u64| Op::CopyRange {
        from: vec![from],
        to: vec![to],
        off_in,
        off_out,
        len,
    };
    let write = |p: u8, off: u64, seed: u64| Op::Write {
        path: vec![p],
        off,
        len: 9000,
        seed,
    };
    let ops = vec![
        Op::BigFile(vec![0], 2_000_000, 1),
        Op::Checkpoint,
        Op::Create(vec![1]),
        copy(0, 1, 100, 4196, 1_500_000),
        write(0, 300_000, 2),
        write(1, 300_000, 3),
        Op::Snapshot,
        copy(1, 2, 0, 8192, 2_000_000),
        Op::Truncate(vec![1], 700_000),
        Op::Fallocate(vec![2], 50_000, 400_000, 0x01 | 0x02),
        Op::FsyncPeek(vec![2]),
        Op::Unlink(vec![0]),
        Op::Reclaim(3000),
        Op::Clean(true),
        Op::Remount,
        copy(2, 2, 0, 3 << 20, 1 << 20),
        write(2, (3 << 20) + 5000, 4),
        Op::SyncCrash,
        Op::Clean(false),
        Op::Unlink(vec![2]),
        Op::Reclaim(3000),
        Op::Remount,
    ];
    let before = SHARED.load(std::sync::atomic::Ordering::Relaxed);
    run(&ops, true);
    assert!(
        SHARED.load(std::sync::atomic::Ordering::Relaxed) > before,
        "no copy shared blocks"
    );
}

/// Large files deleted in the background, unlinked closed and open, renamed
/// over, cut by a crash and a remount in the middle of their freeing: the
/// model sees nothing of it, and the steps free blocks (else `Reclaim`
/// tests nothing).
#[test]
fn background_deletes_under_the_model() {
    let big = |c: u8, n: usize| Op::BigFile(vec![c], n, c as u64);
    let ops = vec![
        big(0, 2_000_000),
        big(1, 1_000_000),
        big(2, 700_000),
        Op::Checkpoint,
        Op::Unlink(vec![0]),
        Op::Reclaim(100),
        Op::Checkpoint,
        Op::Open(vec![1]),
        Op::Unlink(vec![1]),
        Op::Reclaim(3000),
        Op::ReadHandle(0),
        Op::Rename(vec![2], vec![3], 0),
        big(2, 500_000),
        Op::Rename(vec![3], vec![2], 0),
        Op::Reclaim(50),
        Op::SyncCrash,
        Op::Reclaim(10),
        big(0, 900_000),
        Op::Unlink(vec![0]),
        Op::Remount,
        Op::Reclaim(3000),
        Op::Snapshot,
        Op::Unlink(vec![2]),
        Op::Reclaim(3000),
        Op::Remount,
    ];
    let before = RECLAIMED.load(std::sync::atomic::Ordering::Relaxed);
    run(&ops, true);
    assert!(
        RECLAIMED.load(std::sync::atomic::Ordering::Relaxed) > before + 500,
        "the reclaim steps freed (almost) nothing"
    );
}

/// Regression (found by the model test): opening an older checkpoint of an
/// image with fsync records after its last checkpoint applied those records
/// to the old view, so the checkpoint showed later data.
#[test]
fn old_checkpoint_does_not_see_later_fsyncs() {
    run(
        &[
            Op::Create(vec![1]),
            Op::Checkpoint,
            Op::Write {
                path: vec![1],
                off: 0,
                len: 1,
                seed: 5,
            },
            Op::Fsync(vec![1]),
            Op::OpenOld(0),
        ],
        false,
    );
}

/// An unlinked file that is still open cannot get a new name (Linux: ENOENT);
/// linking it would leave a name pointing at an inode deleted at next mount.
#[test]
fn unlinked_open_file_cannot_be_linked() {
    run(
        &[
            Op::Create(vec![0]),
            Op::Open(vec![0]),
            Op::Unlink(vec![0]),
            Op::LinkHandle(0, vec![1]),
            Op::Remount,
        ],
        false,
    );
}

/// A removed directory that is still open accepts no new entries (Linux:
/// ENOENT); they would be lost when the directory is deleted.
#[test]
fn removed_open_directory_takes_no_new_entries() {
    run(
        &[
            Op::Mkdir(vec![0]),
            Op::Open(vec![0]),
            Op::Rmdir(vec![0]),
            Op::CreateInHandle(0, 1),
            Op::Remount,
        ],
        false,
    );
}

/// Create `path` and write `len` bytes of `seed`'s data at its start, on
/// lsfs and on the model alike.
fn create_and_write(
    fs: &mut dyn Vfs,
    model: &mut dyn Vfs,
    path: &Path,
    len: usize,
    seed: u64,
    what: &str,
) {
    let write = Op::Write {
        path: path.clone(),
        off: 0,
        len,
        seed,
    };
    for op in [Op::Create(path.clone()), write] {
        let got = apply(fs, &op);
        let want = apply(model, &op);
        assert!(got == want, "{what}: {op:?}: lsfs {got:?} model {want:?}");
    }
}
