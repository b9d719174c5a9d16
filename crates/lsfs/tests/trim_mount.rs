//! Discard against a real `lsfs mount` on an image file: after files are
//! deleted, `fstrim` on the mount (FITRIM, sent by the kernel to the mount's
//! root directory) or continuous discard gives the image's blocks back to
//! the host, so `du` of the image shrinks; and the image stays clean.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mounted::{lsfs, lsfs_json, Mounted};

const MIB: u64 = 1 << 20;

/// What the image takes on the host (`du`).
fn du(image: &Path) -> u64 {
    fs::metadata(image).unwrap().blocks() * 512
}

/// A 256 MiB image under /var/tmp (not a tmpfs /tmp: the test is about
/// the host's disk), with a config file that keeps no plain checkpoint
/// back (so deleted files' segments are free at once), mounted with
/// `discard=MODE`; 8 files of 16 MiB written and durable.
fn setup(mode: &str) -> Option<(tempfile::TempDir, PathBuf, Mounted)> {
    if !common::fuse_available() {
        return None;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = tmp.path().join("lsfs.toml");
    fs::write(&cfg, "protection_secs = 0\n").unwrap();
    let opts = format!("discard={mode},config={}", cfg.display());
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &["-o", &opts]);
    for i in 0..8u8 {
        let data: Vec<u8> = (0..16 * MIB).map(|j| (j % 251) as u8 ^ i).collect();
        fs::write(m.mnt.join(format!("f{i}")), &data).unwrap();
    }
    sync(&m.mnt);
    Some((tmp, image, m))
}

/// Hand the kernel's dirty pages to lsfs (syncfs), then make everything
/// durable (an fsync of the root), so that it is on the host: lsfs answers
/// the kernel's WRITEs before their device writes are done.
fn sync(mnt: &Path) {
    let f = fs::File::open(mnt).unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&f);
    // SAFETY: syncfs on a descriptor we own.
    let rc = unsafe { libc::syncfs(fd) };
    assert_eq!(rc, 0, "syncfs: {}", std::io::Error::last_os_error());
    f.sync_all().unwrap();
}

fn delete_half(mnt: &Path) {
    for i in (0..8).step_by(2) {
        fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
    }
    sync(mnt);
}

fn files_read_back(mnt: &Path) {
    for i in (1..8u8).step_by(2) {
        let got = fs::read(mnt.join(format!("f{i}"))).unwrap();
        let want: Vec<u8> = (0..16 * MIB).map(|j| (j % 251) as u8 ^ i).collect();
        assert!(got == want, "f{i} differs");
    }
}

/// `fstrim -v` on the mount says how much it trimmed, and the image
/// shrinks on the host by about the deleted files; nothing is discarded
/// before (discard is off).
#[test]
fn fstrim_on_the_mount_shrinks_the_image() {
    let Some((_tmp, image, m)) = setup("off") else {
        return;
    };
    let full = du(&image);
    assert!(full >= 128 * MIB, "{full} bytes on the host");
    delete_half(&m.mnt);
    let deleted = du(&image);
    assert!(
        deleted + 8 * MIB > full,
        "discard is off, yet the image shrank from {full} to {deleted}"
    );
    let trimmed = match Command::new("fstrim").arg("-v").arg(&m.mnt).output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                out.status.success(),
                "fstrim: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            // "MNT: 60 MiB (62914560 bytes) trimmed"
            let n = text
                .split('(')
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("fstrim said {text:?}"));
            eprintln!("{}", text.trim());
            n
        }
        Err(_) => {
            eprintln!("no fstrim here: lsfs trim instead");
            let v = lsfs_json("trim", &m.mnt);
            v["trimmed_bytes"].as_u64().unwrap()
        }
    };
    let after = du(&image);
    eprintln!(
        "du: {} MiB written, {} MiB after deleting half, {} MiB after trimming",
        full >> 20,
        deleted >> 20,
        after >> 20
    );
    assert!(trimmed >= 64 * MIB, "trimmed only {trimmed} bytes");
    assert!(
        after + 56 * MIB <= deleted,
        "the image did not shrink by the deleted 64 MiB: {deleted} -> {after}"
    );
    // The mount counts it; a second trim through the control socket finds
    // the same free space (nothing remembers what was trimmed).
    let v = lsfs_json("stats", &m.mnt);
    assert_eq!(v["discard"]["trims"], 1, "{}", v["discard"]);
    assert_eq!(v["discard"]["trim_bytes"].as_u64(), Some(trimmed));
    assert!(v["device"]["discard_bytes"].as_u64().unwrap() >= trimmed);
    files_read_back(&m.mnt);
    m.unmount();
    mounted::fsck_clean(&image, "after unmount");
}

/// With `discard=on` the deleted files' segments are discarded by the
/// checkpoints that free them: the image shrinks without any trim.
#[test]
fn continuous_discard_shrinks_the_image_by_itself() {
    let Some((_tmp, image, m)) = setup("on") else {
        return;
    };
    let full = du(&image);
    delete_half(&m.mnt);
    // The files' blocks are freed in the background after the unlinks.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let v = lsfs_json("stats", &m.mnt);
        if v["deletes"]["reclaiming_files"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "deleted files not freed in a minute: {}",
            v["deletes"]
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Segments are freed by checkpoints (a bounded number each, and not
    // while they are in the recovery chain the superblocks name): ask for
    // a few, as the periodic ones would come while the mount is busy.
    for _ in 0..4 {
        let st = lsfs()
            .args(["checkpoint", "create", "--mount"])
            .arg(&m.mnt)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let after = du(&image);
    eprintln!(
        "du: {} MiB written, {} MiB after deleting half",
        full >> 20,
        after >> 20
    );
    assert!(
        after + 56 * MIB <= full,
        "the image did not shrink by the deleted 64 MiB: {full} -> {after}"
    );
    files_read_back(&m.mnt);
    m.unmount();
    mounted::fsck_clean(&image, "after unmount");
}
