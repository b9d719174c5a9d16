//! `lsfs defrag` on a real mount: a file scattered by random rewrites
//! (each made durable, so that its blocks land in many records) is laid
//! out again in far fewer physical runs, reads back the same, and the
//! image stays clean; bad paths get a clear error.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use mounted::lsfs;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

#[test]
fn defrag_lays_a_scattered_file_out_again() {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "256M", &[]);
    fs::create_dir(m.mnt.join("d")).unwrap();
    let path = m.mnt.join("d/f");
    let blocks = 2048u64;
    let mut data: Vec<u8> = (0..blocks * 4096).map(|i| (i % 253) as u8).collect();
    fs::write(&path, &data).unwrap();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    let mut x: u64 = 99;
    for n in 0..600u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = (x >> 33) % blocks;
        let block = [(n % 251) as u8; 4096];
        f.write_all_at(&block, b * 4096).unwrap();
        data[(b * 4096) as usize..((b + 1) * 4096) as usize].copy_from_slice(&block);
        if n % 8 == 7 {
            f.sync_data().unwrap();
        }
    }
    f.sync_all().unwrap();
    drop(f);

    // The whole mount, by its mount point.
    let out = lsfs()
        .args(["defrag", "--json"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{v}");
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(n("files"), 1, "{v}");
    assert_eq!(n("files_moved"), 1, "{v}");
    assert_eq!(n("blocks_moved"), blocks, "{v}");
    assert!(n("runs_before") > 100, "not scattered enough to test: {v}");
    assert!(n("runs_after") * 10 < n("runs_before"), "{v}");
    assert!(fs::read(&path).unwrap() == data, "contents changed");

    // A file named directly, contiguous now: nothing to do.
    let out = lsfs()
        .args(["defrag", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["blocks_moved"].as_u64(), Some(0), "{v}");

    // A path that is not on lsfs.
    let out = lsfs().args(["defrag"]).arg(tmp.path()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not on a mounted lsfs"), "{err}");

    m.unmount();
    mounted::fsck_clean(&image, "after defrag");
}
