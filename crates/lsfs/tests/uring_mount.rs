//! `lsfs mount --uring on` through the real binary: the mount serves
//! through FUSE over io_uring, and `lsfs stats` says the requests came
//! through it. Needs root and Linux 6.14+ (the mount turns the kernel's
//! `enable_uring` switch on).

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use std::fs;

#[test]
fn uring_on_serves_through_the_ring_and_stats_say_so() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &["--uring", "on"]);
    let d = m.mnt.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..50 {
        fs::write(d.join(i.to_string()), format!("file {i}")).unwrap();
    }
    for i in 0..50 {
        assert_eq!(
            fs::read_to_string(d.join(i.to_string())).unwrap(),
            format!("file {i}")
        );
    }
    assert_eq!(fs::read_dir(&d).unwrap().count(), 50);
    let s = mounted::lsfs_json("stats", &m.mnt);
    let (total, ring) = (
        s["fuse"]["total"].as_u64().unwrap(),
        s["fuse"]["through_io_uring"].as_u64().unwrap(),
    );
    // 50 files made and written: at least a LOOKUP and a MKNOD each.
    assert!(ring >= 100, "{ring} of {total} requests through io_uring");
    m.unmount();
    mounted::fsck_clean(&image, "after the uring mount");
}

/// Without the switch the counter stays at zero: the test above would
/// fail if the transport were silently off.
#[test]
fn default_mount_serves_through_dev_fuse() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &[]);
    fs::write(m.mnt.join("f"), b"x").unwrap();
    let s = mounted::lsfs_json("stats", &m.mnt);
    assert!(s["fuse"]["total"].as_u64().unwrap() > 0);
    assert_eq!(s["fuse"]["through_io_uring"].as_u64(), Some(0), "{s}");
    m.unmount();
}
