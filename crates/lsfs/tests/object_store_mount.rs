//! A file system in an object store (`file://` URLs, one file per object)
//! through the real commands: mkfs, mount, write, unmount, mount again,
//! read back, fsck; a second read-write mount is refused while the first
//! holds the lease, a read-only one is not, and the unmount gives the
//! lease back. And fsck names flush records that wait in the store, a
//! snapshot's reader follows the writer's cleaner, and a reader with a
//! cache on disk reads from it after a remount.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use mounted::{fsck_clean, lsfs, lsfs_json, object_scratch, Mounted};
use std::fs;
use std::path::PathBuf;

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

/// `lsfs mkfs --size 256M URL`, which must succeed.
fn mkfs(url: &str) {
    let st = lsfs()
        .args(["mkfs", "--size", "256M", url])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "mkfs {url}: {st}");
}

#[test]
fn a_file_system_in_an_object_store_through_the_mount() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let store = tmp.path().join("bucket");
    let url = format!("file://{}/fs", store.display());
    let target = PathBuf::from(&url);
    mkfs(&url);
    let again = lsfs()
        .args(["mkfs", "--size", "256M", &url])
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "mkfs over a file system without --force"
    );

    let (mnt, mnt2) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    fs::create_dir(&mnt).unwrap();
    fs::create_dir(&mnt2).unwrap();
    let big = data(1, 12 << 20);
    let m = Mounted::new(&target, &mnt, &[]);
    fs::create_dir(m.mnt.join("d")).unwrap();
    fs::write(m.mnt.join("d/big"), &big).unwrap();
    for n in 0..50 {
        fs::write(m.mnt.join(format!("d/s{n}")), data(n, 3000)).unwrap();
    }
    // One writer: a second read-write mount is refused, naming the lease.
    let out = lsfs()
        .arg("mount")
        .arg(&target)
        .arg(&mnt2)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mounted read-write elsewhere"), "{err}");
    // Readers besides: a read-only mount sees the last checkpoint.
    let sync = std::process::Command::new("sync")
        .arg("-f")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(sync.success());
    m.unmount();
    let segs = fs::read_dir(store.join("fs/seg")).unwrap().count();
    assert!(segs >= 6, "12 MiB of data in {segs} segment objects");
    assert!(
        !store.join("fs/lease").exists(),
        "the lease went with the unmount"
    );
    fsck_clean(&target, "after the first mount");

    let m = Mounted::new(&target, &mnt, &[]);
    let r = Mounted::new(&target, &mnt2, &["-o", "ro"]);
    assert_eq!(fs::read(r.mnt.join("d/big")).unwrap(), big);
    for n in 0..50 {
        assert_eq!(
            fs::read(m.mnt.join(format!("d/s{n}"))).unwrap(),
            data(n, 3000)
        );
    }
    r.unmount();
    m.unmount();
    fsck_clean(&target, "after the second mount");
}

/// Records kept in the store (`-o object_wal=store`): with the mount
/// killed after an fsync, `lsfs fsck` says how many wait there (writes it
/// did not see) and still exits 0; the next read-write mount stores them,
/// the file reads back, and fsck then says nothing of records.
#[test]
fn fsck_names_flush_records_that_wait_in_the_store() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let url = format!("file://{}/fs", tmp.path().join("bucket").display());
    let target = PathBuf::from(&url);
    mkfs(&url);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let b = data(7, 100_000);
    let m = Mounted::new(&target, &mnt, &["-o", "object_wal=store"]);
    {
        use std::io::Write;
        let mut f = fs::File::create(m.mnt.join("f")).unwrap();
        f.write_all(&b).unwrap();
        f.sync_all().unwrap();
    }
    m.crash();
    let fsck = || {
        let out = lsfs().args(["fsck", &url]).output().unwrap();
        assert!(out.status.success(), "fsck: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let said = fsck();
    assert!(said.contains("flush records wait in the store"), "{said}");
    // A file:// store cannot take a dead holder's lease over (no
    // conditional updates): the user deletes it, as the refusal says.
    fs::remove_file(tmp.path().join("bucket/fs/lease")).unwrap();
    let m = Mounted::new(&target, &mnt, &[]);
    assert!(fs::read(m.mnt.join("f")).unwrap() == b, "the fsynced file");
    m.unmount();
    let said = fsck();
    assert!(!said.contains("flush records"), "{said}");
    fsck_clean(&target, "after the records were stored");
}

/// A read-only mount of a snapshot, on another mount point, while the
/// writer's cleaner moves the snapshot's blocks out of half-dead segments
/// and the writer fills those segments again: the reader follows the
/// writer's DAT (`view_follows` in its stats) and reads the snapshot's
/// file as it was.
#[test]
fn a_snapshot_reader_follows_the_writers_cleaner_through_the_mount() {
    if !common::fuse_available() {
        return;
    }
    use std::os::unix::fs::FileExt;
    let sc = mounted::object_scratch("64M");
    let (target, mnt, mnt2) = (sc.target.clone(), sc.mnt.clone(), sc.mnt2.clone());
    // No plain checkpoint kept: b's blocks are dead for the cleaner as
    // soon as b goes. Discards at once: a segment the cleaner freed and the
    // log did not reuse is deleted from the store by the next upload,
    // rather than left holding what the reader would read there anyway.
    let config = sc.tmp.path().join("lsfs.toml");
    fs::write(&config, "protection_secs = 0\n").unwrap();
    let w = Mounted::new(
        &target,
        &mnt,
        &["--config", config.to_str().unwrap(), "-o", "discard=on"],
    );

    // a and b interleaved, 16 KiB at a time, so that every segment holding
    // a also holds b; then b goes.
    let kept = data(3, 8 << 20);
    let (a, b) = (
        fs::File::create(w.mnt.join("a")).unwrap(),
        fs::File::create(w.mnt.join("b")).unwrap(),
    );
    for (i, c) in kept.chunks(16 << 10).enumerate() {
        let off = (i * (16 << 10)) as u64;
        a.write_all_at(c, off).unwrap();
        a.sync_data().unwrap();
        b.write_all_at(&data(4, c.len()), off).unwrap();
        b.sync_data().unwrap();
    }
    drop((a, b));
    fs::remove_file(w.mnt.join("b")).unwrap();
    let v = mounted::lsfs_args_json(&["snapshot", "create"], &w.mnt);
    let cno = v["cno"]
        .as_u64()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string();
    let r = Mounted::new(&target, &mnt2, &["--checkpoint", &cno, "-o", "ro"]);

    // The writer cleans the half-dead segments (moving a's blocks) and
    // writes the device full several times over.
    let copied = mounted::lsfs_args_json(&["gc", "run", "--segments", "64"], &w.mnt);
    let pass = copied.to_string();
    assert!(
        copied["blocks_copied"].as_u64().unwrap() > 0,
        "the pass moved nothing: {pass}"
    );
    for round in 0..8 {
        fs::write(w.mnt.join("c"), data(10 + round, 16 << 20)).unwrap();
        let sync = std::process::Command::new("sync")
            .arg("-f")
            .arg(&w.mnt)
            .status()
            .unwrap();
        assert!(sync.success());
    }
    // A checkpoint asked for is in the store at once: the segments the
    // writer wrote again are there for the reader to find.
    mounted::lsfs_args_json(&["checkpoint", "create"], &w.mnt);
    assert!(
        fs::read(r.mnt.join("a")).unwrap() == kept,
        "the snapshot's reader read other data"
    );
    let follows = mounted::lsfs_json("stats", &r.mnt)["view_follows"]
        .as_u64()
        .unwrap();
    assert!(
        follows > 0,
        "the reader never had to follow the writer; {pass}"
    );
    r.unmount();
    w.unmount();
    fsck_clean(&target, "after the snapshot's reader");
}

/// A read-only mount with `object_disk_cache` keeps the segments it reads
/// on local disk. Mounted again, it reads the same file from there, each
/// segment after a GET conditional on its ETag that returns no bytes
/// (`disk_cache_revalidated`); after the writer rewrote the file, it reads
/// the new contents, not its entries.
#[test]
fn a_reader_with_a_disk_cache_reads_from_it_after_a_remount() {
    if !common::fuse_available() {
        return;
    }
    let sc = object_scratch("64M");
    let (v1, v2) = (data(41, 8 << 20), data(42, 8 << 20));
    let w = Mounted::new(&sc.target, &sc.mnt, &[]);
    fs::write(w.mnt.join("f"), &v1).unwrap();
    w.unmount();
    let opts = format!(
        "ro,object_disk_cache={}",
        sc.tmp.path().join("reader-cache").display()
    );
    let counters = |m: &Mounted| lsfs_json("stats", &m.mnt)["object_store"].clone();
    let read_with_cache = |want: &[u8]| {
        let r = Mounted::new(&sc.target, &sc.mnt2, &["-o", &opts]);
        assert!(fs::read(r.mnt.join("f")).unwrap() == want, "the file");
        let c = counters(&r);
        r.unmount();
        c
    };
    let first = read_with_cache(&v1);
    assert!(
        first["get_bytes"].as_u64().unwrap() >= v1.len() as u64,
        "{first}"
    );
    let again = read_with_cache(&v1);
    assert!(
        again["get_bytes"].as_u64().unwrap() < v1.len() as u64 / 4,
        "read from disk: {again}"
    );
    assert!(
        again["disk_cache_revalidated"].as_u64().unwrap() >= 4,
        "{again}"
    );

    let w = Mounted::new(&sc.target, &sc.mnt, &[]);
    fs::write(w.mnt.join("f"), &v2).unwrap();
    w.unmount();
    let after = read_with_cache(&v2);
    assert!(
        after["get_bytes"].as_u64().unwrap() >= v2.len() as u64,
        "{after}"
    );
    fsck_clean(&sc.target, "after a reader with a disk cache");
}
