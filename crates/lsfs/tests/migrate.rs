//! `lsfs migrate`: a file system moved from an image file into a real S3
//! server (SeaweedFS on 127.0.0.1, `weed/`) and back is the same file
//! system, byte for byte, with its snapshot; it mounts and grows in the
//! store, and what it gained there comes back. What must be refused is:
//! a source mounted read-write, a destination holding a file system, a
//! source that is not lsfs.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;
mod weed;

use mounted::{fsck_clean, lsfs, Mounted};
use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use weed::Weed;

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

/// `cmd` (an `lsfs` command), which must succeed; its output.
fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cmd`, which must fail saying `why`.
fn refused(cmd: &mut Command, why: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{cmd:?} succeeded");
    assert!(err.contains(why), "{cmd:?} said {err:?}, not {why:?}");
}

/// The files the tests write at `root`: name and contents.
fn tree(seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut t = vec![("big".to_string(), data(seed, 6 << 20))];
    for n in 0..40 {
        t.push((format!("d/f{n}"), data(seed + n, 1 + 997 * n as usize)));
    }
    t
}

fn write_tree(root: &Path, t: &[(String, Vec<u8>)]) {
    fs::create_dir_all(root.join("d")).unwrap();
    for (name, bytes) in t {
        fs::write(root.join(name), bytes).unwrap();
    }
}

fn check_tree(root: &Path, t: &[(String, Vec<u8>)], what: &str) {
    for (name, bytes) in t {
        let got = fs::read(root.join(name)).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(got == *bytes, "{what}: {name} differs");
    }
}

#[test]
fn an_image_moves_to_s3_and_back_unchanged() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, mnt) = (tmp.path().join("a.img"), tmp.path().join("mnt"));
    fs::create_dir(&mnt).unwrap();
    ok(lsfs().args(["mkfs", "--size", "256M"]).arg(&image));
    let (before, after) = (tree(1), tree(2));
    let m = Mounted::new(&image, &mnt, &[]);
    write_tree(&m.mnt, &before);
    let snap = ok(lsfs()
        .args(["snapshot", "create", "--json", "--mount"])
        .arg(&m.mnt));
    let snap: serde_json::Value = serde_json::from_slice(&snap.stdout).unwrap();
    let cno = snap["cno"].as_u64().expect("snapshot's cno").to_string();
    write_tree(&m.mnt, &after);
    m.unmount();

    let w = Weed::start("migrate");
    let url = w.url("fs");
    let out = ok(w
        .apply(&mut lsfs())
        .args(["migrate", "--json"])
        .arg(&image)
        .arg(&url));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fsck"], "clean", "{v}");
    // Free segments are not uploaded: 256 MiB of device, 12 MiB of files.
    let written = v["bytes_written"].as_u64().unwrap();
    assert!(
        written < 64 << 20,
        "{written} bytes uploaded for 12 MiB of files"
    );
    refused(
        w.apply(&mut lsfs()).arg("migrate").arg(&image).arg(&url),
        "already holds an lsfs file system",
    );

    // Back, untouched: the same bytes as the image it came from.
    let same = tmp.path().join("same.img");
    ok(w.apply(&mut lsfs()).arg("migrate").arg(&url).arg(&same));
    assert!(
        fs::read(&image).unwrap() == fs::read(&same).unwrap(),
        "the image came back from the store changed"
    );

    // In the store it mounts, keeps its snapshot, and grows.
    let m = Mounted::run(
        {
            let mut c = lsfs();
            w.apply(&mut c).arg("mount").arg(&url).arg(&mnt);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            c
        },
        &mnt,
    );
    check_tree(&m.mnt, &after, "the store's newest checkpoint");
    fs::write(m.mnt.join("new"), data(9, 300_000)).unwrap();
    m.unmount();
    let snap_mnt = tmp.path().join("snap");
    fs::create_dir(&snap_mnt).unwrap();
    let s = Mounted::run(
        {
            let mut c = lsfs();
            w.apply(&mut c)
                .arg("mount")
                .arg(&url)
                .arg(&snap_mnt)
                .args(["--checkpoint", &cno]);
            c.stdout(Stdio::null()).stderr(Stdio::null());
            c
        },
        &snap_mnt,
    );
    check_tree(&s.mnt, &before, "the snapshot in the store");
    s.unmount();

    // And back to an image file, with what it gained.
    let back = tmp.path().join("back.img");
    ok(w.apply(&mut lsfs()).arg("migrate").arg(&url).arg(&back));
    fsck_clean(&back, "the migration back");
    let m = Mounted::new(&back, &mnt, &[]);
    check_tree(&m.mnt, &after, "the image back from the store");
    assert!(fs::read(m.mnt.join("new")).unwrap() == data(9, 300_000));
    m.unmount();
}

#[test]
fn migrate_refuses_a_busy_or_foreign_source_and_an_occupied_destination() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, mnt) = (tmp.path().join("a.img"), tmp.path().join("mnt"));
    fs::create_dir(&mnt).unwrap();
    ok(lsfs().args(["mkfs", "--size", "64M"]).arg(&image));
    let store = format!("file://{}/store/fs", tmp.path().display());
    let m = Mounted::new(&image, &mnt, &[]);
    refused(lsfs().arg("migrate").arg(&image).arg(&store), "is in use");
    m.unmount();

    let other = tmp.path().join("other.img");
    ok(lsfs().args(["mkfs", "--size", "64M"]).arg(&other));
    refused(
        lsfs().arg("migrate").arg(&image).arg(&other),
        "already holds an lsfs file system",
    );
    ok(lsfs().args(["migrate", "--force"]).arg(&image).arg(&other));
    assert!(fs::read(&image).unwrap() == fs::read(&other).unwrap());

    let foreign = tmp.path().join("foreign.img");
    fs::write(&foreign, vec![7u8; 1 << 20]).unwrap();
    refused(
        lsfs().arg("migrate").arg(&foreign).arg(&store),
        "no valid superblock",
    );
    refused(lsfs().arg("migrate").arg(&image).arg(&image), "both");
}
