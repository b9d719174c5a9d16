//! The lsfs engine mounted with FUSE over io_uring (`UringMode::On`): the
//! POSIX cases of `common/cases.rs`, each required to have gone through
//! the ring, and a check that once the ring is up every request but the
//! kernel's FORGETs comes through it.
//!
//! Needs root and a kernel with FUSE over io_uring (Linux 6.14+); the
//! mount turns `/sys/module/fuse/parameters/enable_uring` on.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::engine;
use lsfs_fuse::{MountOptions, Op, RequestCounters, UringMode};

posix_suite!(engine, uring);

/// Requests through `/dev/fuse` other than the ones the kernel always
/// sends there (FORGET and BATCH_FORGET, counted as FORGET).
fn not_forgets(c: &RequestCounters) -> u64 {
    c.total() - c.get(Op::Forget)
}

/// The queues register once the kernel has FUSE_INIT's reply; until
/// then requests come through /dev/fuse. Stat missing names under `root`
/// until one comes through the ring.
fn wait_for_ring(c: &RequestCounters, root: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut i = 0;
    while c.ring_requests() == 0 {
        assert!(
            Instant::now() < deadline,
            "no request came through the ring"
        );
        let _ = fs::metadata(root.join(format!("probe{i}")));
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn every_request_goes_through_the_ring_once_it_is_up() {
    every_request_through_the_ring(Duration::ZERO);
}

/// The same with the queue threads polling between requests
/// (`uring/poll.rs`).
#[test]
fn every_request_goes_through_a_polling_ring() {
    every_request_through_the_ring(Duration::from_millis(1));
}

fn every_request_through_the_ring(ring_spin: Duration) {
    if !common::fuse_available() {
        return;
    }
    let opts = MountOptions {
        uring: UringMode::On,
        ring_spin,
        ..common::options(true)
    };
    let c = opts.counters.clone();
    let mount = common::TestMount::with_options(engine(), &opts);
    let root = mount.root().to_path_buf();
    wait_for_ring(&c, &root);
    let (all0, ring0) = (not_forgets(&c), c.ring_requests());

    let d = root.join("d");
    fs::create_dir(&d).unwrap();
    let f = d.join("f");
    let mut file = fs::File::create(&f).unwrap();
    file.write_all(&vec![7u8; 300_000]).unwrap();
    file.sync_all().unwrap();
    drop(file);
    assert_eq!(fs::read(&f).unwrap(), vec![7u8; 300_000]);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("f", d.join("l")).unwrap();
    assert_eq!(fs::read_link(d.join("l")).unwrap().to_str(), Some("f"));
    fs::hard_link(&f, d.join("h")).unwrap();
    fs::rename(d.join("h"), d.join("h2")).unwrap();
    let mut names: Vec<_> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["f", "h2", "l"]);
    fs::remove_file(d.join("h2")).unwrap();
    fs::remove_file(d.join("l")).unwrap();
    fs::remove_file(&f).unwrap();
    fs::remove_dir(&d).unwrap();
    assert!(fs::metadata(&d).is_err());

    let all = not_forgets(&c) - all0;
    let ring = c.ring_requests() - ring0;
    assert!(all > 10, "only {all} requests");
    assert_eq!(
        ring,
        all,
        "{ring} of {all} requests came through the ring ({:?})",
        c.snapshot()
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect::<Vec<_>>()
    );
    mount.unmount();
}

/// F2FS's atomic-write ioctls through the ring: START and COMMIT are
/// answered from a thread of their own (which first has the kernel write
/// the file's pages back, as WRITE requests the queues serve meanwhile),
/// and their answers must find their way back to the ring entry.
#[test]
fn atomic_write_ioctls_are_answered_through_the_ring() {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    if !common::fuse_available() {
        return;
    }
    // include/uapi/linux/f2fs.h
    const START: u64 = 0xf501;
    const COMMIT: u64 = 0xf502;
    const ABORT: u64 = 0xf505;
    let ioctl = |f: &fs::File, cmd: u64| {
        // SAFETY: these commands take no argument; `f` stays open.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), cmd as _) };
        assert_eq!(r, 0, "ioctl {cmd:#x}: {}", std::io::Error::last_os_error());
    };
    let opts = MountOptions {
        uring: UringMode::On,
        ..common::options(true)
    };
    let c = opts.counters.clone();
    let mount = common::TestMount::with_options(engine(), &opts);
    let path = mount.root().join("db");
    fs::write(&path, b"0000").unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.sync_all().unwrap();
    wait_for_ring(&c, mount.root());
    let (all0, ring0, ioctls0) = (not_forgets(&c), c.ring_requests(), c.get(Op::Ioctl));

    ioctl(&f, START);
    f.write_all_at(b"11", 0).unwrap();
    ioctl(&f, COMMIT);
    ioctl(&f, START);
    f.write_all_at(b"22", 2).unwrap();
    ioctl(&f, ABORT);
    drop(f);
    assert_eq!(fs::read(&path).unwrap(), b"1100");
    assert_eq!(c.get(Op::Ioctl) - ioctls0, 4);
    assert_eq!(
        c.ring_requests() - ring0,
        not_forgets(&c) - all0,
        "not every request came through the ring"
    );
    mount.unmount();
}
