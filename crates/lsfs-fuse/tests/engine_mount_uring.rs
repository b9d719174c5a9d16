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

#[test]
fn every_request_goes_through_the_ring_once_it_is_up() {
    if !common::fuse_available() {
        return;
    }
    let opts = MountOptions {
        uring: UringMode::On,
        ..common::options(true)
    };
    let c = opts.counters.clone();
    let mount = common::TestMount::with_options(engine(), &opts);
    let root = mount.root().to_path_buf();
    // The queues register once the kernel has FUSE_INIT's reply; until
    // then requests come through /dev/fuse.
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
