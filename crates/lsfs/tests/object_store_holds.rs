//! Readers' holds through the real commands, on a `file://` store: a
//! read-only mount of checkpoint N writes its hold; the writer, which
//! keeps plain checkpoints 13 s, promotes N at its next look, so N
//! outlives its protection and the writer's rewrites and checkpoints, and
//! the reader reads its file back; `lsfs stats` names N as held; once the
//! reader unmounts, its hold is gone and the writer's next round demotes
//! N. A reader of the newest checkpoint moves on to newer ones, its hold
//! with it.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use mounted::{fsck_clean, lsfs, lsfs_args_json, lsfs_json, object_scratch, Mounted};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

/// `lsfs checkpoint ARGS --json --mount MNT`, which must succeed, parsed.
fn checkpoint(mnt: &Path, args: &[&str]) -> Value {
    lsfs_args_json(&[&["checkpoint"], args].concat(), mnt)
}

/// Checkpoint `cno` of the mount at `mnt`: Some(whether it is a
/// snapshot), or None if it is gone.
fn snapshot_flag(mnt: &Path, cno: u64) -> Option<bool> {
    const CP_SNAPSHOT: u64 = 2;
    checkpoint(mnt, &["list"])["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cno"].as_u64() == Some(cno))
        .map(|c| c["flags"].as_u64().unwrap_or(0) & CP_SNAPSHOT != 0)
}

const PROTECTION_SECS: u64 = 13;

fn hold_objects(store: &Path) -> usize {
    fs::read_dir(store.join("fs/readers")).map_or(0, |d| d.count())
}

/// A writer of `sc`'s store that keeps plain checkpoints 13 s: longer
/// than the 10 s between its looks at the holds, so a held one is
/// promoted before it expires.
fn writer_keeping_plain_checkpoints_briefly(sc: &mounted::ObjectScratch) -> Mounted {
    let config = sc.tmp.path().join("lsfs.toml");
    fs::write(&config, format!("protection_secs = {PROTECTION_SECS}\n")).unwrap();
    Mounted::new(&sc.target, &sc.mnt, &["--config", config.to_str().unwrap()])
}

/// Checkpoint `n`, made at `made` and held by a reader, is promoted by
/// the writer at `mnt` within its protection, and stays a snapshot past
/// that protection while the writer rewrites file `f` over most of the
/// 64 MiB, checkpointing each time (contents from `seed` on).
fn kept_through_rewrites(mnt: &Path, n: u64, made: Instant, seed: u64) {
    let deadline = made + Duration::from_secs(PROTECTION_SECS);
    while snapshot_flag(mnt, n) != Some(true) {
        assert!(Instant::now() < deadline, "checkpoint {n} not promoted");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Past N's protection: the next checkpoint would give it up.
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1));
    for round in 0..8 {
        fs::write(mnt.join("f"), data(round + seed, 4 << 20)).unwrap();
        checkpoint(mnt, &["create"]);
    }
    assert_eq!(snapshot_flag(mnt, n), Some(true), "kept for the reader");
}

#[test]
fn the_writer_keeps_the_checkpoint_a_reader_holds() {
    if !common::fuse_available() {
        return;
    }
    let sc = object_scratch("64M");
    let (store, target, rmnt) = (sc.store.clone(), sc.target.clone(), sc.mnt2.clone());
    let w = writer_keeping_plain_checkpoints_briefly(&sc);

    // Checkpoint N, and a reader of it, which holds it.
    let old = data(1, 4 << 20);
    fs::write(w.mnt.join("f"), &old).unwrap();
    let n = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    let made = Instant::now();
    // And one no reader holds, made with it: the writer gives it up.
    fs::write(w.mnt.join("g"), b"g").unwrap();
    let unheld = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    let r = Mounted::new(
        &target,
        &rmnt,
        &["--checkpoint", &n.to_string(), "-o", "ro"],
    );
    assert_eq!(hold_objects(&store), 1, "the reader's hold");
    kept_through_rewrites(&w.mnt, n, made, 2);
    assert_eq!(snapshot_flag(&w.mnt, unheld), None, "given up, unheld");
    assert!(
        fs::read(r.mnt.join("f")).unwrap() == old,
        "the reader's file"
    );
    let promoted: Vec<u64> =
        serde_json::from_slice(&fs::read(store.join("fs/readers-promoted")).unwrap()).unwrap();
    assert_eq!(promoted, vec![n]);
    let stats = lsfs_json("stats", &w.mnt);
    assert_eq!(stats["readers"]["held"][n.to_string()], 1, "{stats}");
    let text = lsfs()
        .args(["stats", "--mount"])
        .arg(&w.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("readers' holds"), "{text}");

    // The reader goes, and its hold with it; the writer's next round (in
    // 10 s at most) demotes N, which the next checkpoint gives up: its
    // protection is long past.
    r.unmount();
    assert_eq!(hold_objects(&store), 0, "the hold went with the reader");
    let deadline = Instant::now() + Duration::from_secs(15);
    while snapshot_flag(&w.mnt, n) == Some(true) {
        assert!(Instant::now() < deadline, "snapshot {n} not demoted");
        std::thread::sleep(Duration::from_millis(250));
    }
    let promoted: Vec<u64> =
        serde_json::from_slice(&fs::read(store.join("fs/readers-promoted")).unwrap()).unwrap();
    assert!(promoted.is_empty(), "{promoted:?}");
    w.unmount();
    fsck_clean(&target, "after the holds");
}

/// A writer that mounts while a reader holds a checkpoint past the
/// writer's protection keeps it through its open (whose mount checkpoint
/// would give it up) and promotes it at its first look.
#[test]
fn a_writer_mounting_keeps_a_held_checkpoint_past_its_protection() {
    if !common::fuse_available() {
        return;
    }
    let sc = object_scratch("64M");
    let (tmp, target) = (&sc.tmp, sc.target.clone());
    let (mnt, rmnt) = (sc.mnt.clone(), sc.mnt2.clone());
    let old = data(5, 1 << 20);
    let w = Mounted::new(&target, &mnt, &[]);
    fs::write(w.mnt.join("f"), &old).unwrap();
    let n = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    w.unmount();
    let r = Mounted::new(
        &target,
        &rmnt,
        &["--checkpoint", &n.to_string(), "-o", "ro"],
    );
    // The next writer keeps nothing for protection's sake.
    let config = tmp.path().join("lsfs.toml");
    fs::write(&config, "protection_secs = 0\n").unwrap();
    let w = Mounted::new(&target, &mnt, &["--config", config.to_str().unwrap()]);
    assert_eq!(
        snapshot_flag(&w.mnt, n),
        Some(true),
        "kept through the open"
    );
    for round in 0..4 {
        fs::write(w.mnt.join("f"), data(round + 6, 1 << 20)).unwrap();
        checkpoint(&w.mnt, &["create"]);
    }
    assert_eq!(snapshot_flag(&w.mnt, n), Some(true), "kept for the reader");
    assert!(
        fs::read(r.mnt.join("f")).unwrap() == old,
        "the reader's file"
    );
    r.unmount();
    w.unmount();
    fsck_clean(&target, "after the writer's open");
}

/// A read-only mount without `--checkpoint` of a store that a writer
/// holds shows the writer's newest checkpoint and holds it as a reader of
/// that checkpoint would: the writer promotes it, keeps it past its
/// protection and through its rewrites, and the reader reads its file
/// back. With no writer, the same mount takes no hold and shows the
/// newest state.
#[test]
fn a_reader_of_the_newest_state_holds_the_writers_newest_checkpoint() {
    if !common::fuse_available() {
        return;
    }
    let sc = object_scratch("64M");
    let (store, target, rmnt) = (sc.store.clone(), sc.target.clone(), sc.mnt2.clone());
    let w = writer_keeping_plain_checkpoints_briefly(&sc);
    let old = data(11, 4 << 20);
    fs::write(w.mnt.join("f"), &old).unwrap();
    let n = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    let made = Instant::now();
    // `reader_follow_secs=0`: it stays on N rather than moving on to the
    // writer's newer checkpoints (the next test).
    let r = Mounted::new(&target, &rmnt, &["-o", "ro,reader_follow_secs=0"]);
    assert_eq!(hold_objects(&store), 1, "the reader's hold");
    let shown = &lsfs_json("stats", &r.mnt)["checkpoint"]["shown"];
    assert_eq!(shown.as_u64(), Some(n), "lsfs stats names it");
    kept_through_rewrites(&w.mnt, n, made, 12);
    assert!(
        fs::read(r.mnt.join("f")).unwrap() == old,
        "the reader's file"
    );
    r.unmount();
    let newest = data(19, 4 << 20);
    fs::write(w.mnt.join("f"), &newest).unwrap();
    w.unmount();

    let r = Mounted::new(&target, &rmnt, &["-o", "ro"]);
    assert_eq!(hold_objects(&store), 0, "no writer, no hold");
    let shown = &lsfs_json("stats", &r.mnt)["checkpoint"]["shown"];
    assert!(
        shown.is_null(),
        "the newest state is no checkpoint's view: {shown}"
    );
    assert!(
        fs::read(r.mnt.join("f")).unwrap() == newest,
        "the newest state"
    );
    r.unmount();
    fsck_clean(&target, "after the newest state's readers");
}

/// The checkpoints the reader holds named in `store`'s hold objects.
fn held_cnos(store: &Path) -> Vec<u64> {
    let Ok(d) = fs::read_dir(store.join("fs/readers")) else {
        return Vec::new();
    };
    d.map(|e| {
        let v: Value = serde_json::from_slice(&fs::read(e.unwrap().path()).unwrap()).unwrap();
        v["cno"].as_u64().unwrap()
    })
    .collect()
}

/// Wait up to `secs` for `ok`, which says what it saw when it fails.
fn within(secs: u64, what: &str, mut ok: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match ok() {
            Ok(()) => return,
            Err(seen) if Instant::now() > deadline => panic!("{what}: {seen}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A read-only mount of an object store's newest checkpoint moves on to
/// the writer's newer checkpoints by itself: its hold moves with it, `lsfs
/// stats` names the new one, and the kernel's cached pages, names and
/// attributes follow: a file rewritten reads new, also through a
/// descriptor opened before the move, a file created appears and a file
/// removed disappears.
#[test]
fn a_reader_of_the_newest_checkpoint_moves_on_to_the_writers_newer_ones() {
    if !common::fuse_available() {
        return;
    }
    let sc = object_scratch("64M");
    let (store, target, rmnt) = (sc.store.clone(), sc.target.clone(), sc.mnt2.clone());
    let w = Mounted::new(&target, &sc.mnt, &[]);
    let (v1, v2) = (data(31, 1 << 20), data(32, 1 << 20));
    fs::write(w.mnt.join("f"), &v1).unwrap();
    fs::write(w.mnt.join("gone"), b"soon removed").unwrap();
    let n1 = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    let r = Mounted::new(&target, &rmnt, &["-o", "ro,reader_follow_secs=1"]);
    let shown = || lsfs_json("stats", &r.mnt)["checkpoint"]["shown"].as_u64();
    assert_eq!(shown(), Some(n1));
    assert_eq!(held_cnos(&store), vec![n1]);
    assert!(fs::read(r.mnt.join("f")).unwrap() == v1);
    assert!(r.mnt.join("gone").exists() && !r.mnt.join("new").exists());
    // Held open across the move, its pages cached.
    let mut open = fs::File::open(r.mnt.join("f")).unwrap();

    fs::write(w.mnt.join("f"), &v2).unwrap();
    fs::write(w.mnt.join("new"), b"made after n1").unwrap();
    fs::remove_file(w.mnt.join("gone")).unwrap();
    let n2 = checkpoint(&w.mnt, &["create"])["cno"].as_u64().unwrap();
    assert!(n2 > n1);

    within(15, "the reader moved on", || match shown() {
        Some(c) if c >= n2 => Ok(()),
        c => Err(format!("shows {c:?}, the writer made {n2}")),
    });
    let now = shown().unwrap();
    assert_eq!(held_cnos(&store), vec![now], "the hold moved with the view");
    assert!(
        lsfs_json("stats", &r.mnt)["view_moves"].as_u64().unwrap() >= 1,
        "counted"
    );
    within(3, "the reader's names and data", || {
        let f = fs::read(r.mnt.join("f")).map_err(|e| e.to_string())?;
        let names = (r.mnt.join("new").exists(), r.mnt.join("gone").exists());
        (f == v2 && names == (true, false))
            .then_some(())
            .ok_or(format!("f new: {}, (new, gone): {names:?}", f == v2))
    });
    let mut through_open = Vec::new();
    use std::io::{Read, Seek};
    open.seek(std::io::SeekFrom::Start(0)).unwrap();
    open.read_to_end(&mut through_open).unwrap();
    assert!(
        through_open == v2,
        "a descriptor opened before the move reads the newer checkpoint"
    );
    drop(open);
    r.unmount();
    assert_eq!(hold_objects(&store), 0, "the hold goes at unmount");
    w.unmount();
    fsck_clean(&target, "after a reader that moved on");
}
