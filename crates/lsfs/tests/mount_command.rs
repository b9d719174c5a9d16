//! lsfs through mount(8): `mount -t fuse.lsfs IMAGE DIR`, an fstab line
//! (`mount -T FILE DIR`, so /etc/fstab stays untouched), and the call
//! mount(8) makes to an installed /sbin/mount.fuse.lsfs. Each must return
//! once the file system is mounted, serve writes, and leave a clean image
//! after `umount`.
//!
//! Nothing is installed: mount.fuse3 runs the program named after `fuse.`
//! and accepts a path there, so `-t fuse.<this build's lsfs>` reaches this
//! build exactly as `-t fuse.lsfs` reaches an installed /usr/local/bin/lsfs.

mod common;

use common::{is_mounted, lsfs, mount_line, server_gone, UnmountOnDrop};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Why this machine cannot run the test, if it cannot.
fn unable() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mount(8) needs root");
    }
    if !Path::new("/sbin/mount.fuse3").exists() && !Path::new("/sbin/mount.fuse").exists() {
        return Some("no /sbin/mount.fuse (package fuse3)");
    }
    None
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run")
}

fn check_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `umount`, then wait for the server's last checkpoint; fsck is clean.
fn umount_and_fsck(mnt: &Path, image: &Path) {
    check_ok("umount", &run(Command::new("umount").arg(mnt)));
    assert!(!is_mounted(mnt), "still mounted after umount");
    assert!(
        server_gone(mnt, image),
        "the server did not exit after umount"
    );
    let out = run(lsfs().arg("fsck").arg(image));
    check_ok("fsck after umount", &out);
}

struct Setup {
    _tmp: tempfile::TempDir,
    image: PathBuf,
    mnt: PathBuf,
    fstype: String,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("disk.img");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = std::fs::canonicalize(&mnt).unwrap();
    let out = run(lsfs().args(["mkfs", "--size", "256M"]).arg(&image));
    check_ok("mkfs", &out);
    let bin = std::fs::canonicalize(env!("CARGO_BIN_EXE_lsfs")).unwrap();
    let fstype = format!("fuse.{}", bin.display());
    Setup {
        _tmp: tmp,
        image,
        mnt,
        fstype,
    }
}

#[test]
fn mount_t_fuse_lsfs_and_an_fstab_line() {
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let s = setup();
    let _guard = UnmountOnDrop {
        mnt: s.mnt.clone(),
        image: s.image.clone(),
    };

    // mount -t fuse.lsfs IMAGE DIR, with a kernel flag and an lsfs setting.
    let out = run(Command::new("mount")
        .args(["-t", &s.fstype, "-o", "noatime,cache_size=16M,nofail"])
        .arg(&s.image)
        .arg(&s.mnt));
    check_ok("mount -t fuse.lsfs", &out);
    assert!(
        out.stderr.is_empty(),
        "mount(8)'s helper talks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = mount_line(&s.mnt).expect("mount returned before the mount was there");
    assert!(line.contains(" fuse.lsfs "), "{line}");
    assert!(line.contains("noatime"), "{line}");
    std::fs::write(s.mnt.join("hello"), b"through mount(8)").unwrap();
    assert_eq!(
        std::fs::read(s.mnt.join("hello")).unwrap(),
        b"through mount(8)"
    );
    umount_and_fsck(&s.mnt, &s.image);

    // The same through a line of a private fstab, with what such lines
    // carry for mount(8) and systemd.
    let fstab = s._tmp.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a comment\n{} {} {} defaults,noauto,nofail,_netdev,x-systemd.automount,\
             x-systemd.device-timeout=5,comment=test,threads=2,spin_us=0 0 0\n",
            s.image.display(),
            s.mnt.display(),
            s.fstype
        ),
    )
    .unwrap();
    let out = run(Command::new("mount").arg("-T").arg(&fstab).arg(&s.mnt));
    check_ok("mount -T fstab DIR", &out);
    assert!(
        is_mounted(&s.mnt),
        "mount -T returned before the mount was there"
    );
    assert_eq!(
        std::fs::read(s.mnt.join("hello")).unwrap(),
        b"through mount(8)",
        "the first mount's write did not last"
    );
    std::fs::write(s.mnt.join("again"), b"through fstab").unwrap();
    umount_and_fsck(&s.mnt, &s.image);

    // Read-only from fstab's point of view too.
    let out = run(Command::new("mount")
        .args(["-t", &s.fstype, "-o", "ro"])
        .arg(&s.image)
        .arg(&s.mnt));
    check_ok("mount -o ro", &out);
    assert_eq!(
        std::fs::read(s.mnt.join("again")).unwrap(),
        b"through fstab"
    );
    let e = std::fs::write(s.mnt.join("nope"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "EROFS expected: {e}");
    umount_and_fsck(&s.mnt, &s.image);
}

#[test]
fn mount_fuse_lsfs_link_takes_mount8s_call() {
    if let Some(why) = unable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let s = setup();
    let _guard = UnmountOnDrop {
        mnt: s.mnt.clone(),
        image: s.image.clone(),
    };
    let helper = s._tmp.path().join("mount.fuse.lsfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_lsfs"), &helper).unwrap();

    // What mount(8) passes for a `user,nofail` line: user adds
    // noexec,nosuid,nodev, and the fstab-only options are still there.
    let helper_call = |opts: &str| {
        run(Command::new(&helper)
            .arg(&s.image)
            .arg(&s.mnt)
            .args(["-o", opts, "-t", "fuse.lsfs"]))
    };
    let out = helper_call("rw,noexec,nosuid,nodev,nofail,user,_netdev");
    check_ok("mount.fuse.lsfs", &out);
    let line = mount_line(&s.mnt).expect("not mounted");
    for flag in ["rw", "nosuid", "nodev", "noexec"] {
        assert!(
            line.split([' ', ',']).any(|f| f == flag),
            "{flag} not in {line}"
        );
    }
    std::fs::write(s.mnt.join("f"), b"data").unwrap();
    umount_and_fsck(&s.mnt, &s.image);

    // A wrong option is named, mount(8)'s usage code comes back, and
    // nothing is mounted.
    let out = helper_call("rw,bogus_option");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown mount option 'bogus_option'"), "{err}");
    assert!(!is_mounted(&s.mnt));
    // So does a failed mount, with mount(8)'s code for it.
    let out = run(Command::new(&helper)
        .arg(s._tmp.path().join("mnt/../disk.img.missing"))
        .arg(&s.mnt));
    assert_eq!(out.status.code(), Some(32), "{out:?}");
    assert!(!is_mounted(&s.mnt));
    // mount -f: checked, not mounted.
    let out = run(Command::new(&helper).arg(&s.image).arg(&s.mnt).arg("-f"));
    check_ok("mount.fuse.lsfs -f", &out);
    assert!(!is_mounted(&s.mnt), "-f mounted");
}
