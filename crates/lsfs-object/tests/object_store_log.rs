//! Flush records kept in the store itself (`object_wal = "store"`,
//! `store_log.rs`): a flush stores one small object instead of whole
//! segments; what a crash leaves is replayed by the next read-write open,
//! whatever mode it runs in and on whichever machine, since nothing is
//! local; records are deleted once uploaded; a log with a hole, or a
//! record of another file system, is refused rather than half replayed.

mod common;

use common::*;
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_object::{ObjectDevice, Target, WalConfig, WalPlace};
use lsfs_vfs::{Vfs, ROOT_INO};
use object_store::memory::InMemory;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn in_store(max_bytes: u64) -> WalConfig {
    WalConfig {
        place: WalPlace::Store,
        max_bytes,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The names of the records in the store, in order.
fn records(t: &Target) -> Vec<String> {
    let list = rt()
        .block_on(t.store.list_with_delimiter(Some(&t.path("log"))))
        .unwrap();
    let mut v: Vec<String> = list
        .objects
        .iter()
        .map(|o| o.location.filename().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn mkfs(t: &Target) {
    ObjectDevice::create(t, geo(), true).unwrap();
    let opts = MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: "log".into(),
    };
    let dev = ObjectDevice::open(t, true, 8 << 20).unwrap();
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts, MountConfig::default()).unwrap();
    fs.unmount().unwrap();
}

/// Six files, each fsynced, on a mount keeping its records in the store;
/// then the process "dies" (the device's kill switch). Returns the files.
fn fsync_and_die(t: &Target, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let dev = ObjectDevice::open_with(t, true, 8 << 20, Some(&in_store(64 << 20))).unwrap();
    let kill = dev.kill_switch();
    let mut fs = Lsfs::open(Box::new(dev), MountConfig::default()).unwrap();
    let files = six_fsynced_files(&mut fs, prefix);
    kill.store(true, Ordering::Relaxed);
    drop(fs);
    files
}

/// What a user does once the dead writer's machine is known gone: the
/// refusal names the lease object to delete.
fn give_up_the_lease(t: &Target) {
    let _ = rt().block_on(t.store.delete(&t.path("lease")));
}

#[test]
fn fsynced_files_survive_the_machine_in_records_in_the_store() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/log");
    mkfs(&t);
    let files = fsync_and_die(&t, "f");
    // The lease says the records are in the store: a build that does not
    // know records refuses to take it over, as for a write-ahead file.
    let lease = rt()
        .block_on(async { t.store.get(&t.path("lease")).await?.bytes().await })
        .unwrap();
    let holder: serde_json::Value = serde_json::from_slice(&lease).unwrap();
    assert_eq!(holder["wal"], "store", "{holder}");
    let left = records(&t);
    assert!(left.len() >= 6, "a record per fsync at least: {left:?}");
    assert_eq!(left[0].len(), 20, "names sort as numbers: {left:?}");

    // Readers see the store as of the last upload: not the records.
    {
        let ro = ObjectDevice::open(&t, false, 8 << 20).unwrap();
        let mut cfg = MountConfig::default();
        cfg.store.read_only = true;
        let mut fs = Lsfs::open(Box::new(ro), cfg).unwrap();
        assert!(fs.lookup(ROOT_INO, b"f5").is_err(), "f5 only in records");
    }
    // Another machine: no local state at all, and a mount in the default
    // mode. It replays the records, stores them and deletes them.
    give_up_the_lease(&t);
    let dev = ObjectDevice::open(&t, true, 8 << 20).unwrap();
    assert!(records(&t).is_empty(), "replayed records are deleted");
    files_read_back_and_fsck_is_clean(dev, &t, &files);
}

#[test]
fn a_flush_stores_one_small_object_and_uploads_delete_the_records() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/small");
    mkfs(&t);
    let dev = ObjectDevice::open_with(&t, true, 8 << 20, Some(&in_store(1 << 20))).unwrap();
    let mut fs = Lsfs::open(Box::new(dev), MountConfig::default()).unwrap();
    let a = fs
        .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino;
    let get = |fs: &Lsfs, k: &str| {
        let c = fs.store.device_extra_counters();
        c.iter().find(|(n, _)| *n == k).map_or(0, |x| x.1)
    };
    // Ten fsyncs of 4 KiB: most store one small object and nothing else
    // (one may have to upload first: after the mount's checkpoint, or
    // when the log starts a segment).
    let mut small = 0;
    for n in 0..10u64 {
        let (puts, bytes) = (get(&fs, "puts"), get(&fs, "put_bytes"));
        fs.write(a, n * 4096, &data(n as u8, 4096)).unwrap();
        fs.fsync(a, false).unwrap();
        let (p, b) = (get(&fs, "puts") - puts, get(&fs, "put_bytes") - bytes);
        if p == 1 && b < 64 << 10 {
            small += 1;
        }
    }
    assert!(small >= 8, "{small} of 10 fsyncs stored one small object");
    // Past the bound (1 MiB of records), everything goes up and the
    // records go.
    for n in 0..80u64 {
        fs.write(a, n * 16384, &data(n as u8, 16384)).unwrap();
        fs.fsync(a, false).unwrap();
    }
    assert!(
        records(&t).len() < 70,
        "uploads deleted records: {}",
        records(&t).len()
    );
    fs.unmount().unwrap();
    drop(fs);
    assert!(records(&t).is_empty(), "the unmount stored everything");
}

#[test]
fn a_log_with_a_hole_or_a_foreign_record_is_refused() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/hole");
    mkfs(&t);
    fsync_and_die(&t, "f");
    give_up_the_lease(&t);
    let left = records(&t);
    let middle = t.path(&format!("log/{}", left[left.len() / 2]));
    let kept = rt()
        .block_on(async { t.store.get(&middle).await?.bytes().await })
        .unwrap();
    rt().block_on(t.store.delete(&middle)).unwrap();
    let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
    assert!(err.contains("records missing"), "{err}");
    // Put back with one byte changed: not a record of this file system.
    let mut bad = kept.to_vec();
    bad[30] ^= 1;
    rt().block_on(t.store.put(&middle, bad.into())).unwrap();
    give_up_the_lease(&t);
    let err = ObjectDevice::open(&t, true, 8 << 20).err().unwrap();
    assert!(err.contains("not a whole flush record"), "{err}");
    // Whole again: replayed.
    rt().block_on(t.store.put(&middle, kept.into())).unwrap();
    give_up_the_lease(&t);
    drop(ObjectDevice::open(&t, true, 8 << 20).unwrap());
    assert!(records(&t).is_empty());
    // And a file system made again over it starts with no records.
    fsync_and_die(&t, "g");
    give_up_the_lease(&t);
    ObjectDevice::create(&t, geo(), true).unwrap();
    assert!(records(&t).is_empty(), "mkfs --force deletes the records");
}

/// A file system made through a mount that keeps its records in the
/// store: the records written before and after its first upload replay
/// (their checksums follow the file system id the stored superblocks
/// name at each point, as a replay reads it).
#[test]
fn a_file_system_made_with_records_in_the_store_replays() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/made");
    ObjectDevice::create(&t, geo(), false).unwrap();
    let opts = MkfsOptions {
        segment_blocks: SEG_BLOCKS as u32,
        label: "made".into(),
    };
    let dev = ObjectDevice::open_with(&t, true, 8 << 20, Some(&in_store(64 << 20))).unwrap();
    let kill = dev.kill_switch();
    let mut fs = Lsfs::mkfs(Box::new(dev), &opts, MountConfig::default()).unwrap();
    let a = fs
        .mknod(ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, &ctx())
        .unwrap()
        .ino;
    let b = data(9, 300_000);
    fs.write(a, 0, &b).unwrap();
    fs.fsync(a, false).unwrap();
    kill.store(true, Ordering::Relaxed);
    drop(fs);
    give_up_the_lease(&t);
    let dev = ObjectDevice::open(&t, true, 8 << 20).unwrap();
    let mut fs = Lsfs::open(Box::new(dev), MountConfig::default()).unwrap();
    let e = fs.lookup(ROOT_INO, b"a").unwrap();
    assert!(fs.read(e.ino, 0, b.len() as u32).unwrap() == b);
    fs.unmount().unwrap();
}

/// Readers on other machines see only what is uploaded: with records in
/// the store, a file fsynced a moment ago is not in a new reader's view
/// yet; a checkpoint someone asked for is uploaded at once (`publish`), so
/// that readers can mount it; and a flush past the upload lag uploads
/// everything (with a lag of 0, every flush does).
#[test]
fn readers_see_records_in_the_store_once_uploaded() {
    let t = Target::on(Arc::new(InMemory::new()), "fs/lag");
    mkfs(&t);
    let reader = || {
        let mut c = MountConfig::default();
        c.store.read_only = true;
        let dev = ObjectDevice::open(&t, false, 8 << 20).unwrap();
        Lsfs::open(Box::new(dev), c).unwrap()
    };
    let seen = |name: &[u8]| reader().lookup(ROOT_INO, name).is_ok();
    let writer = |lag: Option<std::time::Duration>| {
        let dev = ObjectDevice::open_with(&t, true, 8 << 20, Some(&in_store(64 << 20))).unwrap();
        if let Some(l) = lag {
            dev.set_upload_lag(l);
        }
        Lsfs::open(Box::new(dev), MountConfig::default()).unwrap()
    };
    let make = |fs: &mut Lsfs, name: &[u8]| {
        let ino = fs
            .mknod(ROOT_INO, name, libc::S_IFREG | 0o644, 0, &ctx())
            .unwrap()
            .ino;
        fs.write(ino, 0, b"x").unwrap();
        fs.fsync(ino, false).unwrap();
    };
    let mut fs = writer(None);
    make(&mut fs, b"a");
    assert!(!records(&t).is_empty(), "the fsync stored no record");
    assert!(!seen(b"a"), "a record reached a reader before its upload");
    fs.checkpoint().unwrap();
    assert!(seen(b"a"), "a checkpoint asked for was not uploaded");
    assert!(records(&t).is_empty(), "records left after the upload");
    fs.unmount().unwrap();
    drop(fs);

    let mut fs = writer(Some(std::time::Duration::ZERO));
    make(&mut fs, b"b");
    assert!(seen(b"b"), "a flush past the lag did not upload");
    fs.unmount().unwrap();
}
