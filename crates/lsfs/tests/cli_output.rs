//! What the reporting commands print for a person (text) and for a script
//! (`--json`): dates as UTC date-times, no JSON without `--json`, and a
//! mount that reports itself only once it is there.

// The FUSE tests' fixtures (crates/lsfs-fuse/tests/common): the check for
// /dev/fuse and the mount table.
#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn lsfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lsfs"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run lsfs")
}

fn ok(args: &[&str]) -> String {
    let out = lsfs(args);
    assert!(
        out.status.success(),
        "lsfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn mkfs(image: &Path) {
    ok(&["mkfs", "--size", "256M", image.to_str().unwrap()]);
}

/// `YYYY-MM-DD HH:MM:SS`
fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 19
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b' ',
            13 | 16 => c == b':',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn checkpoint_and_snapshot_lists_show_utc_dates() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img");
    mkfs(&image);
    let img = image.to_str().unwrap();
    ok(&["snapshot", "create", "--image", img]);
    for cmd in ["checkpoint", "snapshot"] {
        let text = ok(&[cmd, "list", "--image", img]);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().contains("CREATED (UTC)"), "{text}");
        let rows: Vec<&str> = lines.collect();
        assert!(!rows.is_empty(), "{text}");
        for row in rows {
            // CNO, MODE, then the date and the time.
            let f: Vec<&str> = row.split_whitespace().collect();
            assert!(is_date_time(&format!("{} {}", f[2], f[3])), "{row}");
        }
        let v: serde_json::Value =
            serde_json::from_str(&ok(&[cmd, "list", "--image", img, "--json"])).unwrap();
        assert!(v["checkpoints"][0]["created_secs"].is_u64(), "{v}");
    }
}

/// The checkpoint numbers `lsfs <cmd> list` shows.
fn listed(cmd: &str, img: &str) -> Vec<u64> {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&[cmd, "list", "--image", img, "--json"])).unwrap();
    let only_snapshots = cmd == "snapshot";
    v["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !only_snapshots || c["flags"].as_u64().unwrap() & 2 != 0)
        .map(|c| c["cno"].as_u64().unwrap())
        .collect()
}

#[test]
fn snapshot_delete_does_what_it_says() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img");
    mkfs(&image);
    let img = image.to_str().unwrap();
    let cno = |text: String| -> u64 {
        text.trim()
            .strip_prefix("snapshot ")
            .unwrap()
            .parse()
            .unwrap()
    };
    let (a, b) = (
        cno(ok(&["snapshot", "create", "--image", img])),
        cno(ok(&["snapshot", "create", "--image", img])),
    );
    // The text list shows only snapshots; the JSON one has every checkpoint.
    let text = ok(&["snapshot", "list", "--image", img]);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(listed("snapshot", img), [a, b]);

    // Deleted: gone from both lists.
    let said = ok(&["snapshot", "delete", &a.to_string(), "--image", img]);
    assert_eq!(
        said.trim(),
        format!("deleted snapshot {a} and its checkpoint")
    );
    assert_eq!(listed("snapshot", img), [b]);
    assert!(!listed("checkpoint", img).contains(&a));

    // Only demoted: gone from the snapshots, still a checkpoint, as said.
    let said = ok(&[
        "snapshot",
        "delete",
        &b.to_string(),
        "--keep-checkpoint",
        "--image",
        img,
    ]);
    assert!(said.contains("is now a plain checkpoint"), "{said}");
    assert!(said.contains("still in `lsfs checkpoint list`"), "{said}");
    assert!(listed("snapshot", img).is_empty());
    assert!(listed("checkpoint", img).contains(&b));
    let text = ok(&["checkpoint", "list", "--image", img]);
    assert!(
        text.lines().any(|l| l
            .split_whitespace()
            .take(2)
            .eq([b.to_string().as_str(), "checkpoint"])),
        "{text}"
    );

    // A plain checkpoint is no snapshot to delete, and stays.
    let plain = lsfs(&["snapshot", "delete", &b.to_string(), "--image", img]);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(1), "{err}");
    assert!(err.contains("is not a snapshot"), "{err}");
    assert!(listed("checkpoint", img).contains(&b));
    let help = ok(&["snapshot", "delete", "--help"]);
    assert!(help.contains("--keep-checkpoint"), "{help}");
    assert!(help.contains("checkpoint list"), "{help}");
}

#[test]
fn a_missing_mount_point_fails_before_claiming_a_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img");
    mkfs(&image);
    let missing = tmp.path().join("no-such-dir");
    for extra in [None, Some("--background")] {
        let mut args = vec!["mount", image.to_str().unwrap(), missing.to_str().unwrap()];
        args.extend(extra);
        let out = lsfs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(!err.contains("mounted"), "{err}");
        assert!(err.contains("mount point"), "{err}");
    }
}

/// `--compress` and `-o compress=` take off, lz4, zstd or zstd:LEVEL, and
/// refuse other words and levels naming the argument and the valid ones,
/// before anything is made or mounted.
#[test]
fn compress_words_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img");
    let img = image.to_str().unwrap();
    for (args, name) in [
        (
            vec!["mkfs", "--size", "64M", "--compress", "gzip", img],
            "--compress",
        ),
        (
            vec!["mount", img, "/nonexistent", "-o", "compress=gzip"],
            "compress=gzip",
        ),
        (
            vec!["mount", img, "/nonexistent", "-o", "compress=zstd:20"],
            "compress=zstd:20",
        ),
    ] {
        let out = lsfs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains(name)
                && (err.contains("must be off, lz4, zstd or zstd:LEVEL (LEVEL 1 to 19)")
                    || err.contains("zstd's level must be 1 to 19")),
            "{args:?}: {err}"
        );
    }
    assert!(!image.exists(), "mkfs made an image it was refused");
    ok(&["mkfs", "--size", "64M", "--compress", "zstd", img]);
}

#[test]
fn reports_of_a_mount_are_text_unless_json_is_asked_for() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    mkfs(&image);
    let m = mnt.to_str().unwrap();
    // Captured through pipes, as `$(lsfs mount --background …)` does: the
    // server must not keep them open (output() would wait for the unmount).
    // Mounted with zstd at a level of its own, which `lsfs stats` names.
    let out = Command::new(env!("CARGO_BIN_EXE_lsfs"))
        .args(["mount", image.to_str().unwrap(), m, "--background"])
        .args(["-o", "compress=zstd:9"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let sock = tmp.path().join(".mnt.lsfs.sock");
    let _unmount = Unmount(mnt.clone(), sock);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("mounted on"), "{err}");
    assert!(!err.contains("Ctrl-C"), "{err}");
    assert!(err.contains("fusermount3 -u"), "{err}");
    assert!(
        tmp.path().join(".mnt.lsfs.log").exists(),
        "the server logs beside the mount point"
    );

    std::fs::write(mnt.join("f"), b"some data").unwrap();
    let text = ok(&["stats", "--mount", m]);
    assert!(
        text.starts_with("device writes / application writes: "),
        "{text}"
    );
    assert!(!text.contains('{'), "{text}");
    for section in [
        "\ncache\n",
        "\ncheckpoint\n",
        "\ndevice\n",
        "\nsegments\n",
        "\nFUSE requests\n",
    ] {
        assert!(text.contains(section), "{section:?} not in\n{text}");
    }
    assert!(text.contains("  compression: zstd:9\n"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--mount", m, "--json"])).unwrap();
    assert!(v["cache"]["capacity_blocks"].is_u64(), "{v}");
    assert!(v["fuse"]["total"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["compress"], "zstd:9", "{v}");

    for (args, want) in [
        (&["gc", "policy", "greedy"][..], "cleaning policy greedy"),
        (
            &["gc", "threaded", "adaptive"][..],
            "threaded logging adaptive",
        ),
        (&["gc", "stop"][..], "background cleaning off"),
        (&["gc", "start"][..], "background cleaning on"),
    ] {
        let mut a = args.to_vec();
        a.extend(["--mount", m]);
        assert_eq!(ok(&a).trim_end(), want);
        a.push("--json");
        let v: serde_json::Value = serde_json::from_str(&ok(&a)).unwrap();
        assert_eq!(v["ok"], true, "{v}");
    }
    let status = ok(&["gc", "status", "--mount", m]);
    assert!(status.starts_with("cleaner on · policy greedy"), "{status}");
}

/// Unmounts the background mount and waits for its server to let go of
/// the control socket, also when the test fails.
struct Unmount(std::path::PathBuf, std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3").arg("-u").arg(&self.0).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.1.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
