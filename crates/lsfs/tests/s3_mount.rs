//! File systems in a real S3 server (SeaweedFS on 127.0.0.1, started and
//! stopped by each test: `weed/`) through the lsfs binary's FUSE mount of
//! `s3://BUCKET/PREFIX`, with signed requests as against any S3 store:
//! * a round trip through unmount and fsck, and the lease that lets one
//!   read-write mount in at a time;
//! * a read-only mount of a snapshot in a second process while the writer
//!   goes on: it reads the snapshot exactly, never the later writes;
//! * the server killed under a mount: the fsync after it fails with EIO
//!   within the bounded retries, the mount turns read-only, and what was
//!   fsynced before is there after the server comes back;
//! * the server stopped (SIGSTOP) under a mount: the fsync fails with EIO
//!   once the request times out, and after the server goes on, the
//!   unmount gives the lease back as usual;
//! * a write-ahead file: small fsyncs upload far fewer bytes than without
//!   it, go on succeeding with the server killed, and survive the mount's
//!   own crash (SIGKILL): the next mount with the file stores them;
//! * the cleaner: `lsfs gc stats` says what its reads fetched, what it
//!   copied and which DELETEs were its victims';
//! * a reader's cache on disk: mounted again, it reads from disk after the
//!   server answers its conditional GETs "not modified".

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;
mod weed;

use mounted::{lsfs, Mounted};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};
use weed::Weed;

fn data(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8)
        .collect()
}

/// `lsfs ARGS` against `w`, which must succeed; its output.
fn ok(w: &Weed, extra_env: &[(&str, &str)], args: &[&str]) -> Output {
    let out = w
        .apply(&mut lsfs())
        .envs(extra_env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lsfs {args:?}: {}\n{}{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        w.log_tail()
    );
    out
}

fn mkfs(w: &Weed, url: &str) {
    ok(w, &[], &["mkfs", "--size", "256M", url]);
}

fn fsck_clean(w: &Weed, url: &str, after: &str) {
    let out = ok(w, &[], &["fsck", url]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("clean"), "fsck {after}: {said}");
}

/// `lsfs mount URL MNT ARGS` against `w` in the foreground; its log (the
/// server's stderr) goes to `log`.
fn mount(
    w: &Weed,
    extra_env: &[(&str, &str)],
    url: &str,
    mnt: &Path,
    args: &[&str],
    log: &Path,
) -> Mounted {
    let mut cmd = lsfs();
    w.apply(&mut cmd)
        .envs(extra_env.iter().copied())
        .arg("mount")
        .arg(url)
        .arg(mnt)
        .args(args)
        .stdout(Stdio::null())
        .stderr(fs::File::create(log).unwrap());
    // A mount that fails says why in its log: put that in the message.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Mounted::run(cmd, mnt)))
        .unwrap_or_else(|_| {
            panic!(
                "lsfs mount {url} failed:\n{}\nserver log:\n{}",
                fs::read_to_string(log).unwrap_or_default(),
                w.log_tail()
            )
        })
}

/// A scratch directory with mount points `mnt` and `mnt2`.
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (a, b) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    (tmp, a, b)
}

fn write_synced(path: &Path, bytes: &[u8]) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn s3_round_trip_fsck_and_one_writer() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-round-trip");
    let (tmp, mnt, mnt2) = scratch();
    let url = w.url("projects/fs");
    mkfs(&w, &url);

    let big = data(1, 12 << 20);
    let m = mount(&w, &[], &url, &mnt, &[], &tmp.path().join("m1.log"));
    fs::create_dir(m.mnt.join("d")).unwrap();
    fs::write(m.mnt.join("d/big"), &big).unwrap();
    for n in 0..50 {
        fs::write(m.mnt.join(format!("d/s{n}")), data(n, 3000)).unwrap();
    }
    // One writer: a second read-write mount, another process as from
    // another machine, finds the lease and is refused.
    let out = w
        .apply(&mut lsfs())
        .arg("mount")
        .arg(&url)
        .arg(&mnt2)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a second writer was let in");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mounted read-write elsewhere"), "{err}");
    assert!(!common::is_mounted(&fs::canonicalize(&mnt2).unwrap()));
    m.unmount();
    fsck_clean(&w, &url, "after the first mount");

    // The unmount gave the lease back: read-write again, everything there.
    let m = mount(&w, &[], &url, &mnt, &[], &tmp.path().join("m2.log"));
    // assert! rather than assert_eq!: a 12 MiB message says nothing.
    assert!(
        fs::read(m.mnt.join("d/big")).unwrap() == big,
        "d/big differs"
    );
    for n in 0..50 {
        assert_eq!(
            fs::read(m.mnt.join(format!("d/s{n}"))).unwrap(),
            data(n, 3000),
            "d/s{n}"
        );
    }
    fs::write(m.mnt.join("d/s0"), b"changed on the second mount").unwrap();
    m.unmount();
    fsck_clean(&w, &url, "after the second mount");
    let m = mount(
        &w,
        &[],
        &url,
        &mnt,
        &["-o", "ro"],
        &tmp.path().join("m3.log"),
    );
    assert_eq!(
        fs::read(m.mnt.join("d/s0")).unwrap(),
        b"changed on the second mount"
    );
    m.unmount();
}

/// The checkpoint number of the snapshot `lsfs snapshot create` made.
fn snapshot(w: &Weed, mnt: &Path) -> u64 {
    let out = ok(
        w,
        &[],
        &[
            "snapshot",
            "create",
            "--json",
            "--mount",
            mnt.to_str().unwrap(),
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["cno"].as_u64().unwrap_or_else(|| panic!("no cno in {v}"))
}

/// Every file of the snapshot's content, by name.
fn read_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let b = fs::read(root.join(&n)).unwrap();
            (n, b)
        })
        .collect()
}

#[test]
fn s3_snapshot_reader_in_another_process_sees_only_the_snapshot() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-snapshot");
    let (tmp, mnt, mnt2) = scratch();
    let mnt3 = tmp.path().join("mnt3");
    fs::create_dir(&mnt3).unwrap();
    let url = w.url("fs");
    mkfs(&w, &url);

    let m = mount(&w, &[], &url, &mnt, &[], &tmp.path().join("writer.log"));
    // The snapshot's content: a file over several segments, small ones.
    let mut want = vec![("big".to_string(), data(7, 5 << 20))];
    for n in 0..8 {
        want.push((format!("f{n}"), data(100 + n, 5000)));
    }
    want.sort();
    for (name, bytes) in &want {
        write_synced(&m.mnt.join(name), bytes);
    }
    let cno = snapshot(&w, &m.mnt);

    // After it: every file rewritten in place, one more, one gone, all
    // durable and in a newer checkpoint.
    let later = |round: u64| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(m.mnt.join("big"))
            .unwrap();
        f.write_all(&data(1000 + round, 1 << 20)).unwrap();
        f.sync_all().unwrap();
        for n in 0..8 {
            write_synced(&m.mnt.join(format!("f{n}")), &data(round * 10 + n, 5000));
        }
        write_synced(&m.mnt.join(format!("late{round}")), b"after the snapshot");
    };
    later(1);
    fs::remove_file(m.mnt.join("f7")).unwrap();
    ok(
        &w,
        &[],
        &["checkpoint", "create", "--mount", m.mnt.to_str().unwrap()],
    );

    // The reader: another lsfs process, read-only, on the snapshot; it
    // takes no lease, so the writer keeps its mount.
    let cno_arg = cno.to_string();
    let r = mount(
        &w,
        &[],
        &url,
        &mnt2,
        &["--checkpoint", &cno_arg, "-o", "ro"],
        &tmp.path().join("reader.log"),
    );
    assert_tree(&r.mnt, &want, "the snapshot, read back");

    // The check above can fail: a read-only mount of the newest checkpoint
    // (what a reader that ignored the snapshot would show) differs.
    let newest = mount(
        &w,
        &[],
        &url,
        &mnt3,
        &["-o", "ro"],
        &tmp.path().join("newest.log"),
    );
    let seen = read_tree(&newest.mnt);
    assert!(
        tree_diff(&seen, &want).is_some(),
        "the newest checkpoint looks like the snapshot"
    );
    assert!(seen.iter().any(|(n, _)| n == "late1"), "{:?}", names(&seen));
    newest.unmount();

    // The writer goes on, and the reader reads while it does.
    let t0 = Instant::now();
    let mut round = 2;
    while round < 6 || t0.elapsed() < Duration::from_secs(3) {
        later(round);
        assert_tree(&r.mnt, &want, &format!("the snapshot, in round {round}"));
        round += 1;
    }
    // Read again with nothing cached in the reader: a fresh open of each
    // file in a fresh mount of the snapshot.
    r.unmount();
    let r = mount(
        &w,
        &[],
        &url,
        &mnt2,
        &["--checkpoint", &cno_arg, "-o", "ro"],
        &tmp.path().join("reader2.log"),
    );
    assert_tree(&r.mnt, &want, "the snapshot, remounted");
    r.unmount();
    m.unmount();
    fsck_clean(&w, &url, "after the writer");
}

fn names(t: &[(String, Vec<u8>)]) -> Vec<&str> {
    t.iter().map(|(n, _)| n.as_str()).collect()
}

/// What differs between two trees, briefly (files of megabytes would make
/// an assert_eq! message unreadable); None if nothing does.
fn tree_diff(got: &[(String, Vec<u8>)], want: &[(String, Vec<u8>)]) -> Option<String> {
    if names(got) != names(want) {
        return Some(format!("names {:?}, want {:?}", names(got), names(want)));
    }
    got.iter().zip(want).find_map(|((n, g), (_, w))| {
        (g != w).then(|| {
            let at = g.iter().zip(w).position(|(a, b)| a != b);
            format!(
                "{n}: {} bytes, want {}; first difference at {at:?}",
                g.len(),
                w.len()
            )
        })
    })
}

/// The tree at `root` is exactly `want`.
fn assert_tree(root: &Path, want: &[(String, Vec<u8>)], what: &str) {
    if let Some(d) = tree_diff(&read_tree(root), want) {
        panic!("{what}: {d}");
    }
}

/// Small bounds on retries, so that a dead server fails requests fast.
const FAST_FAIL: &[(&str, &str)] = &[
    ("LSFS_OBJECT_RETRIES", "2"),
    ("LSFS_OBJECT_RETRY_SECS", "2"),
    ("AWS_TIMEOUT", "5s"),
];

#[test]
fn s3_server_killed_under_a_mount() {
    if !common::fuse_available() {
        return;
    }
    let mut w = Weed::start("lsfs-faults");
    let (tmp, mnt, _) = scratch();
    let url = w.url("fs");
    mkfs(&w, &url);

    let log = tmp.path().join("m1.log");
    let m = mount(&w, FAST_FAIL, &url, &mnt, &[], &log);
    let durable = data(3, 3 << 20);
    write_synced(&m.mnt.join("durable"), &durable);
    fs::create_dir(m.mnt.join("d")).unwrap();
    write_synced(&m.mnt.join("d/small"), b"fsynced before the fault");
    // Open before the fault: after it the mount may refuse to create.
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(m.mnt.join("after"))
        .unwrap();

    w.kill();
    let t0 = Instant::now();
    f.write_all(&data(9, 1 << 20)).unwrap();
    let err = f.sync_all().expect_err("fsync with the server gone");
    let took = t0.elapsed();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(took < Duration::from_secs(30), "EIO after {took:?}");
    eprintln!("fsync failed with EIO after {took:?}");
    drop(f);
    // Read-only now: a change is refused at once, without the store.
    let t1 = Instant::now();
    let e = fs::write(m.mnt.join("d/new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(t1.elapsed() < Duration::from_secs(5));
    // What the mount has in memory still reads.
    let mut got = Vec::new();
    fs::File::open(m.mnt.join("d/small"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!(got, b"fsynced before the fault");

    // Unmounting with the store gone ends in bounded time, whatever the
    // server's exit status (its last checkpoint cannot be written).
    let t2 = Instant::now();
    let st = m.unmount_status();
    assert!(st.is_some(), "lsfs mount still running after unmount");
    eprintln!(
        "unmount with the server gone: {st:?} after {:?}",
        t2.elapsed()
    );

    w.restart();
    // The unmount could not delete the lease with the store gone; the
    // next read-write mount on this machine takes it over, since its
    // holder's process has exited.
    let log2 = tmp.path().join("m2.log");
    let m = mount(&w, &[], &url, &mnt, &[], &log2);
    let said = fs::read_to_string(&log2).unwrap();
    assert!(said.contains("took over the lease"), "{said}");
    assert!(
        fs::read(m.mnt.join("durable")).unwrap() == durable,
        "durable differs after the restart"
    );
    assert_eq!(
        fs::read(m.mnt.join("d/small")).unwrap(),
        b"fsynced before the fault"
    );
    write_synced(&m.mnt.join("d/again"), b"writable again");
    m.unmount();
    fsck_clean(&w, &url, "after the fault");
}

#[test]
fn s3_server_stopped_under_a_mount() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-hang");
    let (tmp, mnt, _) = scratch();
    let url = w.url("fs");
    mkfs(&w, &url);
    // A stopped server takes connections and answers nothing: the
    // request's own timeout bounds the wait (a timed-out PUT is not
    // tried again).
    let hang: &[(&str, &str)] = &[
        ("LSFS_OBJECT_RETRIES", "2"),
        ("LSFS_OBJECT_RETRY_SECS", "2"),
        ("AWS_TIMEOUT", "3s"),
    ];
    let log1 = tmp.path().join("m1.log");
    let m = mount(&w, hang, &url, &mnt, &[], &log1);
    let durable = data(5, 1 << 20);
    write_synced(&m.mnt.join("durable"), &durable);
    let mut f = fs::File::create(m.mnt.join("after")).unwrap();

    w.pause();
    let t0 = Instant::now();
    f.write_all(&data(6, 1 << 20)).unwrap();
    let err = f.sync_all().expect_err("fsync with the server stopped");
    let took = t0.elapsed();
    w.resume();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // 3 s per request, at most a few requests before the flush gives up.
    assert!(took < Duration::from_secs(30), "EIO after {took:?}");
    eprintln!("fsync failed with EIO after {took:?} (server stopped)");
    drop(f);
    let e = fs::write(m.mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");

    // The server is back: the unmount deletes the lease, and the next
    // mount needs no takeover.
    let st = m.unmount_status();
    assert!(st.is_some(), "lsfs mount still running after unmount");
    let log2 = tmp.path().join("m2.log");
    let m = mount(&w, &[], &url, &mnt, &[], &log2);
    let said = fs::read_to_string(&log2).unwrap();
    assert!(
        !said.contains("took over the lease"),
        "{said}\nthe first mount's log:\n{}",
        fs::read_to_string(&log1).unwrap()
    );
    assert!(
        fs::read(m.mnt.join("durable")).unwrap() == durable,
        "durable differs after the stop"
    );
    m.unmount();
    fsck_clean(&w, &url, "after the stop");
}

/// `lsfs stats`'s object-store counters of the mount at `mnt`.
fn object_counters(mnt: &Path) -> serde_json::Value {
    mounted::lsfs_json("stats", mnt)["object_store"].clone()
}

/// `n` files of 4 KiB under `dir`, each written and fsynced; the put
/// bytes of the mount at `mnt` and the time it took.
fn small_fsyncs(mnt: &Path, dir: &str, n: usize) -> (u64, Duration) {
    fs::create_dir(mnt.join(dir)).unwrap();
    let before = object_counters(mnt)["put_bytes"].as_u64().unwrap();
    let t0 = Instant::now();
    for i in 0..n {
        write_synced(&mnt.join(format!("{dir}/f{i}")), &data(i as u64, 4096));
    }
    let took = t0.elapsed();
    let after = object_counters(mnt)["put_bytes"].as_u64().unwrap();
    (after - before, took)
}

/// `--config=FILE` with no checkpoint by time during a test (FILE in
/// `dir`): what goes up is what the fsyncs and the log's segments make go
/// up.
fn no_timed_checkpoints(dir: &std::path::Path) -> String {
    let cfg = dir.join("lsfs.toml");
    fs::write(&cfg, "checkpoint_interval_secs = 3600\n").unwrap();
    format!("--config={}", cfg.display())
}

#[test]
fn s3_write_ahead_file_uploads_less_and_survives_crashes() {
    if !common::fuse_available() {
        return;
    }
    let mut w = Weed::start("lsfs-wal");
    let (tmp, mnt, _) = scratch();
    let url = w.url("fs");
    mkfs(&w, &url);
    let wal = tmp.path().join("fs.wal");
    let wal_opt = format!("object_wal={}", wal.display());
    let cfg_arg = no_timed_checkpoints(tmp.path());
    const N: usize = 30;

    let m = mount(
        &w,
        &[],
        &url,
        &mnt,
        &[&cfg_arg, "-o", "object_wal=off"],
        &tmp.path().join("m0.log"),
    );
    let (plain, plain_t) = small_fsyncs(&m.mnt, "plain", N);
    m.unmount();
    let m = mount(
        &w,
        FAST_FAIL,
        &url,
        &mnt,
        &[&cfg_arg, "-o", &wal_opt],
        &tmp.path().join("m1.log"),
    );
    let (logged, logged_t) = small_fsyncs(&m.mnt, "logged", N);
    let c = object_counters(&m.mnt);
    eprintln!(
        "{N} fsyncs of 4 KiB: {plain} bytes put in {plain_t:?} without the write-ahead file, \
         {logged} bytes put in {logged_t:?} with it ({c})"
    );
    assert!(c["wal_records"].as_u64().unwrap() >= N as u64, "{c}");
    assert!(
        logged * 5 < plain,
        "with the file {logged} bytes put, without {plain}"
    );

    // The store gone: fsyncs go on succeeding into the file (until one
    // needs an upload: the log starting a segment), then the mount dies.
    w.kill();
    let mut kept = Vec::new();
    for i in 0..3 {
        let name = format!("logged/after{i}");
        let b = data(100 + i, 4096);
        let mut f = fs::File::create(m.mnt.join(&name)).unwrap();
        f.write_all(&b).unwrap();
        if f.sync_all().is_err() {
            break;
        }
        kept.push((name, b));
    }
    assert!(!kept.is_empty(), "no fsync succeeded with the store gone");
    m.crash();

    w.restart();
    let log2 = tmp.path().join("m2.log");
    let m = mount(&w, &[], &url, &mnt, &["-o", &wal_opt], &log2);
    let said = fs::read_to_string(&log2).unwrap();
    assert!(said.contains("took over the lease"), "{said}");
    for i in 0..N {
        assert_eq!(
            fs::read(m.mnt.join(format!("logged/f{i}"))).unwrap(),
            data(i as u64, 4096),
            "logged/f{i}"
        );
    }
    for (name, b) in &kept {
        assert_eq!(&fs::read(m.mnt.join(name)).unwrap(), b, "{name}");
    }
    m.unmount();
    fsck_clean(&w, &url, "after the replay");
    // Everything is stored: a mount without the file reads it all.
    let m = mount(
        &w,
        &[],
        &url,
        &mnt,
        &["-o", "ro"],
        &tmp.path().join("m3.log"),
    );
    for (name, b) in &kept {
        assert_eq!(&fs::read(m.mnt.join(name)).unwrap(), b, "{name}");
    }
}

/// `-o object_wal=store`: each fsync stores one small record object, not
/// whole segments; the mount killed (the machine lost: nothing local is
/// used afterwards), a mount with `object_wal=off` replays the records
/// from the store, every fsynced file is there, the records are gone and
/// fsck is clean.
#[test]
fn s3_flush_records_in_the_store_survive_the_machine() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-log");
    let (tmp, mnt, _) = scratch();
    let url = w.url("fs");
    mkfs(&w, &url);
    let cfg_arg = no_timed_checkpoints(tmp.path());
    const N: usize = 30;
    let m = mount(
        &w,
        &[],
        &url,
        &mnt,
        &[&cfg_arg, "-o", "object_wal=store"],
        &tmp.path().join("m0.log"),
    );
    let (put, t) = small_fsyncs(&m.mnt, "logged", N);
    let c = object_counters(&m.mnt);
    eprintln!("{N} fsyncs of 4 KiB with records in the store: {put} bytes put in {t:?} ({c})");
    assert!(c["wal_records"].as_u64().unwrap() >= N as u64, "{c}");
    // Whole segments would be 2 MiB a fsync; a record is about 8 KiB,
    // with an upload now and then when the log starts a segment.
    assert!(put < (N as u64) * (256 << 10), "{put} bytes put");
    m.crash();
    let log = tmp.path().join("m1.log");
    let m = mount(&w, &[], &url, &mnt, &["-o", "object_wal=off"], &log);
    let said = fs::read_to_string(&log).unwrap();
    assert!(said.contains("left as records in the store"), "{said}");
    for i in 0..N {
        assert_eq!(
            fs::read(m.mnt.join(format!("logged/f{i}"))).unwrap(),
            data(i as u64, 4096),
            "logged/f{i}"
        );
    }
    m.unmount();
    fsck_clean(&w, &url, "after the replay");
}

/// `lsfs gc stats --mount MNT` with `--json` parsed, and as text.
fn gc_stats(mnt: &Path) -> (serde_json::Value, String) {
    let run = |json: bool| {
        let mut cmd = lsfs();
        cmd.args(["gc", "stats", "--mount"]).arg(mnt);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "lsfs gc stats: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    (
        serde_json::from_slice(&run(true)).unwrap(),
        String::from_utf8(run(false)).unwrap(),
    )
}

#[test]
fn s3_gc_stats_say_what_the_cleaner_cost_the_store() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-cleaner");
    let (tmp, mnt, _) = scratch();
    let url = w.url("fs");
    // 62 segments of 2 MiB; discards at each checkpoint, so that the
    // victims' objects are deleted before the counters are read.
    ok(&w, &[], &["mkfs", "--size", "128M", &url]);
    let m = mount(
        &w,
        &[],
        &url,
        &mnt,
        &["-o", "discard=on"],
        &tmp.path().join("m.log"),
    );
    // A file over 60 % of it, then 96 MiB of overwrites of 64 KiB at
    // seeded random places: the cleaner must run.
    const CHUNK: u64 = 64 << 10;
    const CHUNKS: u64 = 80 << 4;
    let path = m.mnt.join("f");
    let mut f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    let fill = data(1, CHUNK as usize);
    for _ in 0..CHUNKS {
        f.write_all(&fill).unwrap();
    }
    f.sync_all().unwrap();
    let mut x: u64 = 42;
    for i in 0..(96u64 << 4) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = (x >> 33) % CHUNKS * CHUNK;
        std::os::unix::fs::FileExt::write_all_at(&f, &data(i, CHUNK as usize), at).unwrap();
        if i % 64 == 63 {
            f.sync_all().unwrap();
        }
    }
    f.sync_all().unwrap();
    drop(f);

    let (v, text) = gc_stats(&m.mnt);
    let (s, o) = (&v["stats"], &v["object_store"]);
    let c = &o["cleaner"];
    let n = |v: &serde_json::Value, k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    eprintln!("cleaner: {c}; all: {o}; {} victims", s["segments_cleaned"]);
    assert!(n(s, "segments_cleaned") > 0, "the cleaner did not run: {s}");
    // Its reads of victims fetch whole segment objects; some of them at
    // least were not cached.
    assert!(n(c, "gets") > 0, "{c}");
    assert!(n(c, "gets") <= n(o, "gets"), "{o}");
    assert_eq!(n(c, "get_bytes"), n(c, "gets") * (2 << 20), "{c}");
    assert_eq!(n(c, "copied_bytes"), n(s, "blocks_copied") * 4096);
    // Freed victims' objects deleted, and never more than were freed.
    assert!(n(c, "deletes") > 0, "{c}");
    assert!(n(c, "deletes") <= n(o, "deletes"), "{o}");
    assert!(n(c, "deletes") <= n(s, "segments_cleaned"), "{c} {s}");
    assert!(
        text.contains(&format!(
            "the cleaner's: {} GETs ({} bytes) reading victims",
            n(c, "gets"),
            n(c, "get_bytes")
        )),
        "{text}"
    );
    m.unmount();
    fsck_clean(&w, &url, "after cleaning");
}

/// A read-only mount with `object_disk_cache`, mounted again, reads a file
/// from its disk cache: the server answers each segment's GET conditional
/// on the entry's ETag with "not modified" (`disk_cache_revalidated`), and
/// the GETs' bytes stay far below the file's.
#[test]
fn s3_reader_disk_cache_revalidates_by_etag() {
    if !common::fuse_available() {
        return;
    }
    let w = Weed::start("lsfs-reader-cache");
    let (tmp, mnt, mnt2) = scratch();
    let url = w.url("projects/fs");
    mkfs(&w, &url);
    let f = data(5, 8 << 20);
    let m = mount(&w, &[], &url, &mnt, &[], &tmp.path().join("w.log"));
    fs::write(m.mnt.join("f"), &f).unwrap();
    m.unmount();
    let opts = format!(
        "ro,object_disk_cache={}",
        tmp.path().join("reader-cache").display()
    );
    let mut seen = Vec::new();
    for round in 0..2 {
        let log = tmp.path().join(format!("r{round}.log"));
        let r = mount(&w, &[], &url, &mnt2, &["-o", &opts], &log);
        assert!(fs::read(r.mnt.join("f")).unwrap() == f, "round {round}");
        seen.push(object_counters(&r.mnt));
        r.unmount();
    }
    let again = &seen[1];
    assert!(
        again["disk_cache_revalidated"].as_u64().unwrap() >= 4
            && again["get_bytes"].as_u64().unwrap() < f.len() as u64 / 4,
        "the second mount: {again} (the first: {})",
        seen[0]
    );
    fsck_clean(&w, &url, "after a reader with a disk cache");
}
