//! What the kernel keeps and no longer asks for, counted through the
//! adapter's request counters on a real mount: negative lookups, opens,
//! flushes, directory opens and listings, pages across opens, and the
//! lookup references readdirplus hands out. Each test fails if the kernel
//! went back to sending what it should keep.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fuse_available, TestMount};
use lsfs_fuse::{Op, RequestCounters};
use lsfs_vfs::model::MemFs;

fn mount(writeback_cache: bool) -> (TestMount<MemFs>, Arc<RequestCounters>) {
    let opts = common::options(writeback_cache);
    let counters = opts.counters.clone();
    (TestMount::with_options(MemFs::new(), &opts), counters)
}

fn errno(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// A name that does not exist is looked up once; the kernel keeps the
/// negative entry, and forgets it when the name is created through it.
#[test]
fn missing_names_are_looked_up_once() {
    if !fuse_available() {
        return;
    }
    let (mount, counters) = mount(true);
    let p = mount.root().join("missing");
    assert_eq!(errno(fs::metadata(&p)), Some(libc::ENOENT));
    let lookups = counters.get(Op::Lookup);
    for _ in 0..20 {
        assert_eq!(errno(fs::metadata(&p)), Some(libc::ENOENT));
        assert_eq!(errno(fs::File::open(&p)), Some(libc::ENOENT));
    }
    assert_eq!(
        counters.get(Op::Lookup),
        lookups,
        "negative entry not cached"
    );
    fs::write(&p, b"now here").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"now here");
    mount.unmount();
}

/// Opening, reading and closing a file a hundred times costs no OPEN,
/// FLUSH or RELEASE beyond the one that taught the kernel lsfs needs
/// none, and no READ after the first: the pages stay cached across opens.
/// Listing a directory again costs nothing either.
#[test]
fn opens_closes_and_listings_cost_no_requests() {
    if !fuse_available() {
        return;
    }
    for wb in [true, false] {
        let (mount, counters) = mount(wb);
        let root = mount.root();
        for i in 0..10 {
            fs::write(root.join(format!("f{i}")), vec![i as u8; 20_000]).unwrap();
        }
        fs::create_dir(root.join("d")).unwrap();
        for i in 0..10 {
            assert_eq!(
                fs::read(root.join(format!("f{i}"))).unwrap(),
                vec![i as u8; 20_000]
            );
        }
        assert_eq!(fs::read_dir(root).unwrap().count(), 11);
        let before = counters.snapshot();
        for _ in 0..10 {
            for i in 0..10 {
                // Plain reads, no fstat (fs::read and read_to_end make
                // one): with the writeback cache the kernel drops the
                // block count it cached at every close, so a stat after a
                // close costs a GETATTR.
                let mut f = fs::File::open(root.join(format!("f{i}"))).unwrap();
                let mut got = vec![0u8; 20_000];
                f.read_exact(&mut got).unwrap();
                assert_eq!(got, vec![i as u8; 20_000]);
            }
            assert_eq!(fs::read_dir(root).unwrap().count(), 11);
        }
        let after = counters.snapshot();
        // What an open, a read, a close and a listing would send. (Not
        // GETATTR: attributes the kernel refreshes on its own schedule.)
        let watched = [
            Op::Lookup,
            Op::Open,
            Op::Read,
            Op::Flush,
            Op::Release,
            Op::Opendir,
            Op::Readdir,
            Op::Readdirplus,
            Op::Releasedir,
        ];
        let grown: Vec<_> = before
            .iter()
            .zip(&after)
            .filter(|(a, b)| b.1 > a.1 && watched.contains(&a.0))
            .map(|(a, b)| (a.0.name(), b.1 - a.1))
            .collect();
        assert!(
            grown.is_empty(),
            "writeback cache {wb}: requests for cached files and listings: {grown:?}"
        );
        for op in [Op::Open, Op::Opendir, Op::Flush, Op::Create] {
            assert!(
                counters.get(op) <= 1,
                "writeback cache {wb}: {} sent {} times",
                op.name(),
                counters.get(op)
            );
        }
        for op in [Op::Release, Op::Releasedir] {
            assert_eq!(counters.get(op), 0, "writeback cache {wb}: {}", op.name());
        }
        mount.unmount();
    }
}

/// Python's open() asks whether every file is a terminal: one IOCTL each,
/// refused with ENOTTY (isatty says no) and nothing else.
#[test]
fn isatty_is_refused_with_enotty() {
    if !fuse_available() {
        return;
    }
    let (mount, counters) = mount(true);
    let p = mount.root().join("f");
    fs::write(&p, b"x").unwrap();
    let f = fs::File::open(&p).unwrap();
    for n in 1..=3 {
        // SAFETY: isatty on a descriptor we own; errno is read right after.
        let tty = unsafe { libc::isatty(f.as_raw_fd()) };
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((tty, e), (0, Some(libc::ENOTTY)));
        assert_eq!(counters.get(Op::Ioctl), n);
    }
    drop(f);
    mount.unmount();
}

/// Every entry of a readdirplus reply is a lookup reference the kernel
/// gives back with FORGET: after listing a directory too large for one
/// reply, with names long enough that many entries do not fit and are
/// forgotten again at once, and removing everything, the file system holds
/// no inode but the root. A reference counted twice would keep inodes
/// forever; one not counted would lose a file still in use.
#[test]
fn readdirplus_references_are_given_back() {
    if !fuse_available() {
        return;
    }
    let (mount, counters) = mount(true);
    let d = mount.root().join("d");
    fs::create_dir(&d).unwrap();
    let name = |i: usize| format!("{i:04}-{}", "n".repeat(150));
    for i in 0..300 {
        fs::write(d.join(name(i)), b"x").unwrap();
    }
    // Let the kernel forget the files, so that the listing instantiates them.
    let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
    let listed: Vec<_> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert_eq!(listed, vec![1; 300]);
    assert!(
        counters.get(Op::Readdirplus) >= 2,
        "one reply held everything"
    );
    for i in 0..300 {
        fs::remove_file(d.join(name(i))).unwrap();
    }
    fs::remove_dir(&d).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount.vfs.lock().unwrap().inode_count() != 1 {
        assert!(
            Instant::now() < deadline,
            "{} inodes left: lookup references leaked",
            mount.vfs.lock().unwrap().inode_count()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    mount.unmount();
}
