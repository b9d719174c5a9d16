//! copy_file_range(2) on a real mount shares blocks: copying a 64 MiB file
//! barely changes the free space, both files then take writes apart, the
//! destination's cached pages are not left stale, plain `cp` shares too,
//! and the image stays clean. Through /dev/fuse and through io_uring.

#[path = "../../lsfs-fuse/tests/common/mod.rs"]
mod common;
mod mounted;

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// Free bytes as statfs gives them.
fn free_bytes(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs is plain old data, all zeros is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct to fill, both ours.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}

/// copy_file_range of `len` bytes, going on after short counts; the total.
fn copy_range(from: &File, off_in: u64, to: &File, off_out: u64, len: u64) -> u64 {
    let (mut i, mut o) = (off_in as i64, off_out as i64);
    let mut done = 0;
    while done < len {
        // SAFETY: two descriptors we hold open, offsets we own.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut i,
                to.as_raw_fd(),
                &mut o,
                (len - done) as usize,
                0,
            )
        };
        assert!(
            n >= 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    done
}

fn copies_share_blocks(args: &[&str]) {
    if !common::fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (image, m) = mounted::mkfs_and_mount(tmp.path(), "512M", args);
    let (pa, pb) = (m.mnt.join("a"), m.mnt.join("b"));
    let empty = free_bytes(&m.mnt);
    let mut data: Vec<u8> = (0..64 * MIB).map(|i| (i % 251) as u8).collect();
    fs::write(&pa, &data).unwrap();
    // b holds other bytes, read once so that the kernel caches its pages.
    fs::write(&pb, vec![b'x'; MIB as usize]).unwrap();
    assert_eq!(fs::read(&pb).unwrap()[..4], *b"xxxx");
    let a = OpenOptions::new().read(true).write(true).open(&pa).unwrap();
    a.sync_all().unwrap();
    let b = OpenOptions::new().read(true).write(true).open(&pb).unwrap();
    let free = free_bytes(&m.mnt);
    // statfs does see data written: the checks below mean something.
    assert!(
        empty - free > 60 * MIB,
        "64 MiB written took {} bytes",
        empty - free
    );

    assert_eq!(copy_range(&a, 0, &b, 0, 64 * MIB), 64 * MIB);
    let used = free.saturating_sub(free_bytes(&m.mnt));
    assert!(used < 4 * MIB, "the copy took {used} bytes of free space");
    assert!(fs::read(&pb).unwrap() == data, "b reads other bytes");

    // Writes to either side stay there.
    let mut db = data.clone();
    a.write_all_at(&[1u8; 5000], MIB + 10).unwrap();
    data[(MIB + 10) as usize..(MIB + 5010) as usize].fill(1);
    b.write_all_at(&[2u8; 9000], 2 * MIB - 3).unwrap();
    db[(2 * MIB - 3) as usize..(2 * MIB + 8997) as usize].fill(2);
    assert!(fs::read(&pa).unwrap() == data, "a after the writes");
    assert!(fs::read(&pb).unwrap() == db, "b after the writes");

    // Unaligned: the edges are copied, the blocks between shared.
    let c = File::create(m.mnt.join("c")).unwrap();
    assert_eq!(copy_range(&a, 100, &c, 100, 3 * MIB), 3 * MIB);
    let mut want = vec![0u8; 100];
    want.extend_from_slice(&data[100..(100 + 3 * MIB) as usize]);
    assert!(fs::read(m.mnt.join("c")).unwrap() == want, "c");
    // Past the source's end: nothing.
    assert_eq!(copy_range(&a, 65 * MIB, &c, 0, 10), 0);

    // coreutils cp tries copy_file_range first.
    let free = free_bytes(&m.mnt);
    let st = Command::new("cp")
        .arg(&pa)
        .arg(m.mnt.join("d"))
        .status()
        .unwrap();
    assert!(st.success());
    assert!(fs::read(m.mnt.join("d")).unwrap() == data, "cp's copy");
    let used = free.saturating_sub(free_bytes(&m.mnt));
    eprintln!("cp of 64 MiB took {used} bytes of free space");
    assert!(used < 4 * MIB, "cp's copy took {used} bytes of free space");

    // The kernel sent the copies here rather than copying bytes itself.
    let s = mounted::lsfs_json("stats", &m.mnt);
    let served = s["fuse"]["requests"]["COPY_FILE_RANGE"].as_u64();
    assert!(served.is_some_and(|n| n >= 3), "{}", s["fuse"]);
    if args.contains(&"--uring") {
        assert!(s["fuse"]["through_io_uring"].as_u64() > Some(0));
    }

    drop((a, b, c));
    fs::remove_file(&pa).unwrap();
    assert!(fs::read(&pb).unwrap() == db, "b after a's delete");
    m.unmount();
    mounted::fsck_clean(&image, "after copies");
}

#[test]
fn copy_file_range_shares_blocks() {
    copies_share_blocks(&[]);
}

/// The same through FUSE over io_uring (root and Linux 6.14+).
#[test]
fn copy_file_range_shares_blocks_through_io_uring() {
    copies_share_blocks(&["--uring", "on"]);
}
