//! The control socket against a real `lsfs mount`: a snapshot taken or
//! dropped through it is visible through the mount at once, although the
//! kernel caches the snapshot directory (its listing, and names found
//! missing) without expiry; and a snapshot holds what was written before it
//! was asked for, although with the writeback cache those writes were still
//! in the kernel's page cache.

// The FUSE tests' fixtures (crates/lsfs-fuse/tests/common): the check for
// /dev/fuse and the mount table.
#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use std::fs;
use std::path::Path;

use mounted::{lsfs, Mounted};
use serde_json::json;

/// One request on the mount's control socket, spoken directly: a `lsfs`
/// child process would inherit the test's open files for a moment, and its
/// exec closing them would make the kernel write them back (every close
/// does, with the writeback cache).
fn control(mnt: &Path, req: serde_json::Value) -> serde_json::Value {
    use std::io::{BufRead, BufReader, Write};
    let sock = mnt.parent().unwrap().join(format!(
        ".{}.lsfs.sock",
        mnt.file_name().unwrap().to_str().unwrap()
    ));
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    writeln!(s, "{req}").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["ok"], true, "{req}: {v}");
    v
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn snapshots_through_the_control_socket_show_at_once() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &[]);
    let snapdir = m.mnt.join(".lsfs/snapshot");

    // Written, not fsynced. The kernel writes a file back when it is
    // closed, so "open" stays open: its data is only in the page cache.
    fs::write(m.mnt.join("a"), b"before the snapshot").unwrap();
    let mut f = fs::File::create(m.mnt.join("open")).unwrap();
    let writes = |m: &Mounted| {
        control(&m.mnt, json!({"cmd": "stats"}))["stats"]["fuse"]["requests"]["WRITE"].as_u64()
    };
    let sent = writes(&m);
    std::io::Write::write_all(&mut f, b"still in the page cache").unwrap();
    assert_eq!(
        writes(&m),
        sent,
        "no writeback cache: the test tests nothing"
    );

    // The kernel caches the empty listing and a few names as missing.
    assert!(listing(&snapdir).is_empty());
    for cno in 1..=30 {
        assert!(fs::metadata(snapdir.join(cno.to_string())).is_err());
    }

    let cno = control(&m.mnt, json!({"cmd": "snapshot"}))["cno"]
        .as_u64()
        .unwrap();
    let snap = snapdir.join(cno.to_string());
    assert_eq!(
        listing(&snapdir),
        [cno.to_string()],
        "the new snapshot is listed"
    );
    assert_eq!(
        fs::read(snap.join("a")).unwrap(),
        b"before the snapshot",
        "the snapshot misses a write made before it was asked for"
    );
    assert_eq!(
        fs::read(snap.join("open")).unwrap(),
        b"still in the page cache",
        "the snapshot misses what a still-open file had written"
    );
    drop(f);

    // The snapshot keeps its contents while the live file changes.
    fs::write(m.mnt.join("a"), b"after").unwrap();
    assert_eq!(fs::read(snap.join("a")).unwrap(), b"before the snapshot");
    assert_eq!(fs::read(m.mnt.join("a")).unwrap(), b"after");

    // Dropped: gone from the listing and by name, at once.
    control(&m.mnt, json!({"cmd": "demote", "cno": cno}));
    assert!(
        listing(&snapdir).is_empty(),
        "a dropped snapshot is still listed"
    );
    assert!(
        fs::metadata(&snap).is_err(),
        "a dropped snapshot is still found by name"
    );

    // Promoting a plain checkpoint shows it too.
    let cp = control(&m.mnt, json!({"cmd": "checkpoint"}))["cno"]
        .as_u64()
        .unwrap();
    assert!(fs::metadata(snapdir.join(cp.to_string())).is_err());
    control(&m.mnt, json!({"cmd": "promote", "cno": cp}));
    assert_eq!(listing(&snapdir), [cp.to_string()]);
    assert_eq!(
        fs::read(snapdir.join(cp.to_string()).join("a")).unwrap(),
        b"after"
    );

    // The requests the mount served are in `lsfs stats --json`.
    let out = lsfs()
        .args(["stats", "--json", "--mount"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        stats["fuse"]["requests"]["LOOKUP"].as_u64().unwrap() > 0,
        "{stats}"
    );
    assert!(stats["fuse"]["total"].as_u64().unwrap() > 0);

    m.unmount();
    mounted::fsck_clean(&image, "after unmount");
}

/// A snapshot holds every write() that returned before it was asked for,
/// even when the kernel still has dirty pages of many open files: its
/// syncfs only starts their writeback on a FUSE mount, so the control
/// socket must also wait for it. Several rounds, since a round can win the
/// race by luck.
#[test]
fn a_snapshot_waits_for_every_dirty_page() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "1G", &[]);
    const ROUNDS: usize = 10;
    const FILES: usize = 32;
    const BYTES: usize = 1 << 20;
    for round in 0..ROUNDS {
        // Left open, so that no close writes them back; each file's bytes
        // name it and the round, so a page of an older round shows too.
        let fill = |n: usize| (round * FILES + n) as u8;
        let files: Vec<fs::File> = (0..FILES)
            .map(|n| {
                let mut f = fs::File::create(m.mnt.join(format!("f{n}"))).unwrap();
                std::io::Write::write_all(&mut f, &vec![fill(n); BYTES]).unwrap();
                f
            })
            .collect();
        let cno = control(&m.mnt, json!({"cmd": "snapshot"}))["cno"]
            .as_u64()
            .unwrap();
        let snap = m.mnt.join(".lsfs/snapshot").join(cno.to_string());
        for n in 0..FILES {
            let got = fs::read(snap.join(format!("f{n}"))).unwrap();
            let whole = got.len() == BYTES && got.iter().all(|&b| b == fill(n));
            assert!(
                whole,
                "round {round}, f{n}: the snapshot misses part of what was written before it was asked for"
            );
        }
        drop(files);
    }
    m.unmount();
    mounted::fsck_clean(&image, "after unmount");
}
