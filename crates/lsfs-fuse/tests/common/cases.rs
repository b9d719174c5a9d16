//! POSIX behaviour checked through real system calls on a mounted file
//! system. Each case gets the root of an empty mount.

use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The errno of a call that must fail.
fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("call should have failed")
        .raw_os_error()
        .expect("an OS error")
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (a, b) = (cstr(from), cstr(to));
    // SAFETY: valid NUL-terminated paths; the syscall only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    check(r as libc::c_int)
}

/// Set atime and mtime of `p` (without following symlinks); `None` means now.
fn utimens(p: &Path, atime: Option<(i64, i64)>, mtime: Option<(i64, i64)>) -> io::Result<()> {
    let ts = |t: Option<(i64, i64)>| match t {
        Some((sec, nsec)) => libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    };
    let times = [ts(atime), ts(mtime)];
    let c = cstr(p);
    // SAFETY: valid path and a two-element timespec array.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// Push all of `p`'s times far into the past, so any update is visible.
fn age(p: &Path) {
    utimens(p, Some((1_000_000_000, 0)), Some((1_000_000_000, 0))).unwrap();
}

fn mtime_ctime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.ctime())
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A deterministic byte pattern, different for every offset and seed.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn write_read_and_sparse_files(root: &Path) {
    let p = root.join("sparse");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all(b"head").unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(b"tail").unwrap();
    let m = f.metadata().unwrap();
    assert_eq!(m.len(), (1 << 20) + 4);
    assert!(
        m.blocks() * 512 < m.len(),
        "the hole must not be allocated ({} blocks)",
        m.blocks()
    );
    let data = fs::read(&p).unwrap();
    assert_eq!(&data[..4], b"head");
    assert!(
        data[4..1 << 20].iter().all(|&b| b == 0),
        "the hole reads as zeros"
    );
    assert_eq!(&data[1 << 20..], b"tail");
    // Reading at or past EOF returns nothing.
    let mut buf = [0u8; 16];
    f.seek(SeekFrom::Start(10 << 20)).unwrap();
    assert_eq!(f.read(&mut buf).unwrap(), 0);
    // Overwrite in the middle of existing data.
    f.seek(SeekFrom::Start(2)).unwrap();
    f.write_all(b"AD").unwrap();
    drop(f);
    assert_eq!(&fs::read(&p).unwrap()[..4], b"heAD");
}

pub fn random_writes_match_a_shadow_copy(root: &Path) {
    let p = root.join("random");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    let mut shadow = Vec::new();
    // xorshift64: a fixed sequence of offsets and lengths.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..400 {
        let off = (next() % (3 << 20)) as usize;
        let len = (next() % 70_000) as usize + 1;
        let data = pattern(i, len);
        // SAFETY: `data` is a valid buffer of `len` bytes.
        let n =
            unsafe { libc::pwrite(f.as_raw_fd(), data.as_ptr().cast(), len, off as libc::off_t) };
        assert_eq!(n, len as isize);
        if shadow.len() < off + len {
            shadow.resize(off + len, 0);
        }
        shadow[off..off + len].copy_from_slice(&data);
    }
    drop(f);
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), shadow.len());
    assert!(got == shadow, "file contents differ from the shadow copy");
}

pub fn truncate_shrinks_and_extends(root: &Path) {
    let p = root.join("t");
    fs::write(&p, pattern(1, 10_000)).unwrap();
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    age(&p);
    f.set_len(5_000).unwrap();
    let (mtime, ctime) = mtime_ctime(&p);
    assert!(
        mtime > 1_000_000_000 && ctime > 1_000_000_000,
        "truncate updates mtime and ctime"
    );
    assert_eq!(fs::metadata(&p).unwrap().len(), 5_000);
    f.set_len(12_000).unwrap();
    let data = fs::read(&p).unwrap();
    assert_eq!(data.len(), 12_000);
    assert_eq!(&data[..5_000], &pattern(1, 10_000)[..5_000]);
    assert!(
        data[5_000..].iter().all(|&b| b == 0),
        "bytes past the old end read as zeros"
    );
    drop(f);
    // O_TRUNC on open.
    drop(
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap(),
    );
    assert_eq!(fs::metadata(&p).unwrap().len(), 0);
    // Truncating a directory fails.
    let d = root.join("d");
    fs::create_dir(&d).unwrap();
    let c = cstr(&d);
    // SAFETY: valid path.
    let rc = unsafe { libc::truncate(c.as_ptr(), 0) };
    assert_eq!(errno(check(rc)), libc::EISDIR);
}

pub fn open_flags(root: &Path) {
    let p = root.join("f");
    fs::write(&p, b"abc").unwrap();
    assert_eq!(
        errno(OpenOptions::new().write(true).create_new(true).open(&p)),
        libc::EEXIST
    );
    assert_eq!(errno(File::open(root.join("missing"))), libc::ENOENT);
    let mut f = OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"def").unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"abcdef");
    // A new file gets the requested mode minus the umask.
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|s| u32::from_str_radix(s.trim(), 8).unwrap())
        .unwrap();
    let q = root.join("mode");
    drop(
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(&q)
            .unwrap(),
    );
    assert_eq!(
        fs::metadata(&q).unwrap().permissions().mode() & 0o7777,
        0o640 & !umask
    );
    assert_eq!(
        errno(OpenOptions::new().write(true).open(root)),
        libc::EISDIR
    );
}

pub fn rename_semantics(root: &Path) {
    let (a, b) = (root.join("a"), root.join("b"));
    fs::write(&a, b"A").unwrap();
    fs::write(&b, b"B").unwrap();
    let ino_a = fs::metadata(&a).unwrap().ino();
    fs::rename(&a, &b).unwrap();
    assert_eq!(errno(fs::metadata(&a)), libc::ENOENT);
    assert_eq!(fs::read(&b).unwrap(), b"A");
    assert_eq!(fs::metadata(&b).unwrap().ino(), ino_a);

    let (d1, d2, full) = (root.join("d1"), root.join("d2"), root.join("full"));
    for d in [&d1, &d2, &full] {
        fs::create_dir(d).unwrap();
    }
    fs::write(full.join("x"), b"x").unwrap();
    fs::create_dir(d1.join("sub")).unwrap();
    assert_eq!(errno(fs::rename(&d2, &full)), libc::ENOTEMPTY);
    assert_eq!(errno(fs::rename(&d2, &b)), libc::ENOTDIR);
    assert_eq!(errno(fs::rename(&b, &d2)), libc::EISDIR);
    assert_eq!(errno(fs::rename(&d1, d1.join("sub/inside"))), libc::EINVAL);
    assert_eq!(
        errno(fs::rename(root.join("missing"), root.join("x"))),
        libc::ENOENT
    );
    // A directory over an empty one, into another parent.
    fs::rename(&d1, full.join("moved")).unwrap();
    assert!(full.join("moved/sub").is_dir());
    assert_eq!(
        fs::metadata(&full).unwrap().nlink(),
        3,
        "full gained a subdirectory"
    );
    fs::rename(full.join("moved"), &d2).unwrap();
    assert!(d2.join("sub").is_dir());
    assert_eq!(fs::metadata(&full).unwrap().nlink(), 2);
    // Renaming one hard link onto another of the same inode changes nothing.
    fs::hard_link(&b, root.join("b2")).unwrap();
    fs::rename(&b, root.join("b2")).unwrap();
    assert!(b.exists() && root.join("b2").exists());
    assert_eq!(fs::metadata(&b).unwrap().nlink(), 2);
}

pub fn renameat2_noreplace_and_exchange(root: &Path) {
    let (f, d, n) = (root.join("f"), root.join("d"), root.join("new"));
    fs::write(&f, b"file").unwrap();
    fs::create_dir(&d).unwrap();
    fs::write(d.join("inside"), b"i").unwrap();
    assert_eq!(
        errno(renameat2(&f, &d, libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    assert_eq!(fs::read(&f).unwrap(), b"file");
    renameat2(&f, &n, libc::RENAME_NOREPLACE).unwrap();
    assert!(!f.exists() && fs::read(&n).unwrap() == b"file");
    // Exchange a file and a directory: both names stay, types swap.
    renameat2(&n, &d, libc::RENAME_EXCHANGE).unwrap();
    assert!(n.is_dir() && fs::read(n.join("inside")).unwrap() == b"i");
    assert_eq!(fs::read(&d).unwrap(), b"file");
    assert_eq!(
        errno(renameat2(
            &d,
            root.join("missing").as_path(),
            libc::RENAME_EXCHANGE
        )),
        libc::ENOENT
    );
    assert_eq!(
        errno(renameat2(
            &d,
            &n,
            libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE
        )),
        libc::EINVAL
    );
}

pub fn hard_links_and_link_counts(root: &Path) {
    let (a, b) = (root.join("a"), root.join("b"));
    fs::write(&a, b"one").unwrap();
    fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
    assert_eq!((ma.ino(), ma.nlink(), mb.nlink()), (mb.ino(), 2, 2));
    fs::write(&b, b"two").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"two");
    assert_eq!(errno(fs::hard_link(&a, &b)), libc::EEXIST);
    fs::remove_file(&a).unwrap();
    assert_eq!(fs::metadata(&b).unwrap().nlink(), 1);
    assert_eq!(errno(fs::remove_file(&a)), libc::ENOENT);
    // Directories: 2 + number of subdirectories; no hard links to them.
    let d = root.join("d");
    fs::create_dir(&d).unwrap();
    assert_eq!(errno(fs::hard_link(&d, root.join("d2"))), libc::EPERM);
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 2);
    for i in 0..3 {
        fs::create_dir(d.join(format!("s{i}"))).unwrap();
    }
    fs::write(d.join("file"), b"").unwrap();
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 5);
    fs::remove_dir(d.join("s0")).unwrap();
    assert_eq!(fs::metadata(&d).unwrap().nlink(), 4);
    let root_links = fs::metadata(root).unwrap().nlink();
    assert_eq!(root_links, 3, "root has . and .. and d/..");
}

pub fn symlinks(root: &Path) {
    let (t, l) = (root.join("target"), root.join("link"));
    fs::write(&t, b"through the link").unwrap();
    std::os::unix::fs::symlink("target", &l).unwrap();
    assert_eq!(fs::read_link(&l).unwrap(), Path::new("target"));
    let m = fs::symlink_metadata(&l).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(m.len(), 6);
    assert_eq!(fs::read(&l).unwrap(), b"through the link");
    assert_eq!(errno(std::os::unix::fs::symlink("x", &t)), libc::EEXIST);
    let dangling = root.join("dangling");
    std::os::unix::fs::symlink("nowhere", &dangling).unwrap();
    assert_eq!(errno(fs::metadata(&dangling)), libc::ENOENT);
    assert_eq!(errno(fs::read_link(&t)), libc::EINVAL);
    let long = "x/".repeat(1000) + "y";
    std::os::unix::fs::symlink(&long, root.join("long")).unwrap();
    assert_eq!(fs::read_link(root.join("long")).unwrap(), Path::new(&long));
    fs::remove_file(&l).unwrap();
    assert!(t.exists(), "removing a symlink leaves its target");
}

pub fn mkdir_and_rmdir_errors(root: &Path) {
    let d = root.join("d");
    fs::create_dir(&d).unwrap();
    assert_eq!(errno(fs::create_dir(&d)), libc::EEXIST);
    fs::write(d.join("f"), b"").unwrap();
    assert_eq!(errno(fs::remove_dir(&d)), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_dir(d.join("f"))), libc::ENOTDIR);
    assert_eq!(errno(fs::remove_file(&d)), libc::EISDIR);
    assert_eq!(errno(fs::remove_dir(root.join("missing"))), libc::ENOENT);
    assert_eq!(
        errno(fs::create_dir(root.join("missing/sub"))),
        libc::ENOENT
    );
    assert_eq!(
        errno(fs::write(d.join("f/under_a_file"), b"")),
        libc::ENOTDIR
    );
    fs::remove_file(d.join("f")).unwrap();
    fs::remove_dir(&d).unwrap();
    assert_eq!(errno(fs::metadata(&d)), libc::ENOENT);
    assert_eq!(fs::read_dir(root).unwrap().count(), 0);
}

/// A listing that runs while entries are removed and added must return
/// every entry that stayed exactly once, and never one name twice.
pub fn readdir_large_directory_while_deleting(root: &Path) {
    const N: usize = 3000;
    let d = root.join("big");
    fs::create_dir(&d).unwrap();
    for i in 0..N {
        File::create(d.join(format!("f{i:05}"))).unwrap();
    }
    let mut seen = HashSet::new();
    let mut iter = fs::read_dir(&d).unwrap();
    for _ in 0..N / 6 {
        let e = iter.next().unwrap().unwrap();
        assert!(seen.insert(e.file_name()), "duplicate {:?}", e.file_name());
    }
    // Delete every third file (before and after the read position) and add
    // new ones while the listing is half-way.
    for i in (0..N).step_by(3) {
        fs::remove_file(d.join(format!("f{i:05}"))).unwrap();
    }
    for i in 0..200 {
        File::create(d.join(format!("new{i}"))).unwrap();
    }
    for e in iter {
        let e = e.unwrap();
        assert!(seen.insert(e.file_name()), "duplicate {:?}", e.file_name());
    }
    for i in (0..N).filter(|i| i % 3 != 0) {
        let name = format!("f{i:05}");
        assert!(
            seen.contains(std::ffi::OsStr::new(&name)),
            "{name} stayed but was skipped"
        );
    }
    // A fresh listing shows exactly what is there.
    let now: BTreeSet<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let expected: BTreeSet<String> = (0..N)
        .filter(|i| i % 3 != 0)
        .map(|i| format!("f{i:05}"))
        .chain((0..200).map(|i| format!("new{i}")))
        .collect();
    assert_eq!(now, expected);
}

pub fn xattrs(root: &Path) {
    let p = root.join("x");
    fs::write(&p, b"").unwrap();
    let c = cstr(&p);
    let name = |n: &str| CString::new(n).unwrap();
    let set = |n: &str, v: &[u8], flags: i32| {
        let n = name(n);
        // SAFETY: valid path, name and value buffer.
        check(unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) })
    };
    let get = |n: &str, size: usize| -> io::Result<(isize, Vec<u8>)> {
        let n = name(n);
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has room for `size` bytes.
        let r = unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(r.max(0) as usize);
        Ok((r, buf))
    };
    let list = |size: usize| -> io::Result<(isize, Vec<u8>)> {
        let mut buf = vec![0u8; size];
        // SAFETY: as above.
        let r = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), size) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(r.max(0) as usize);
        Ok((r, buf))
    };
    assert_eq!(errno(get("user.a", 100)), libc::ENODATA);
    assert_eq!(
        errno(set("user.a", b"v", libc::XATTR_REPLACE)),
        libc::ENODATA
    );
    set("user.a", b"value-a", libc::XATTR_CREATE).unwrap();
    assert_eq!(errno(set("user.a", b"v", libc::XATTR_CREATE)), libc::EEXIST);
    set("user.a", b"VALUE-A", libc::XATTR_REPLACE).unwrap();
    set("user.empty", b"", 0).unwrap();
    // Size probe, exact read, too small a buffer.
    assert_eq!(get("user.a", 0).unwrap().0, 7);
    assert_eq!(get("user.a", 100).unwrap().1, b"VALUE-A");
    assert_eq!(errno(get("user.a", 3)), libc::ERANGE);
    assert_eq!(get("user.empty", 10).unwrap(), (0, vec![]));
    let want = b"user.a\0user.empty\0";
    assert_eq!(list(0).unwrap().0, want.len() as isize);
    let names: BTreeSet<Vec<u8>> = list(1000)
        .unwrap()
        .1
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([b"user.a".to_vec(), b"user.empty".to_vec()])
    );
    assert_eq!(errno(list(5)), libc::ERANGE);
    // Larger than a page of names, small enough for a one-block store.
    let big = pattern(3, 3000);
    set("user.big", &big, 0).unwrap();
    assert_eq!(get("user.big", 65536).unwrap().1, big);
    let rm = |n: &str| {
        let n = name(n);
        // SAFETY: valid path and name.
        check(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) })
    };
    rm("user.a").unwrap();
    assert_eq!(errno(rm("user.a")), libc::ENODATA);
    assert_eq!(errno(get("user.a", 100)), libc::ENODATA);
}

pub fn chmod_chown_and_utimens(root: &Path) {
    let p = root.join("f");
    fs::write(&p, b"").unwrap();
    age(&p);
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4750)).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o4750);
    assert!(m.ctime() > 1_000_000_000, "chmod changes ctime");
    assert_eq!(m.mtime(), 1_000_000_000, "chmod leaves mtime");
    if is_root() {
        std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
        let m = fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        std::os::unix::fs::lchown(&p, None, Some(42)).unwrap();
        assert_eq!(
            (
                fs::metadata(&p).unwrap().uid(),
                fs::metadata(&p).unwrap().gid()
            ),
            (1234, 42)
        );
    }
    // Exact times with nanoseconds, then "now" for mtime only.
    utimens(
        &p,
        Some((1_500_000_000, 123_456_789)),
        Some((1_600_000_000, 987_654_321)),
    )
    .unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!(
        (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec()),
        (1_500_000_000, 123_456_789, 1_600_000_000, 987_654_321)
    );
    let before = SystemTime::now() - Duration::from_secs(2);
    let omit = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    };
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let c = cstr(&p);
    // SAFETY: valid path and two timespecs.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [omit, now].as_ptr(), 0) }).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!(
        (m.atime(), m.atime_nsec()),
        (1_500_000_000, 123_456_789),
        "UTIME_OMIT keeps atime"
    );
    assert!(
        m.modified().unwrap() >= before,
        "UTIME_NOW sets mtime to now"
    );
    // Times on a symlink itself.
    let l = root.join("l");
    std::os::unix::fs::symlink("f", &l).unwrap();
    utimens(&l, Some((5, 0)), Some((6, 0))).unwrap();
    assert_eq!(fs::symlink_metadata(&l).unwrap().mtime(), 6);
    assert_eq!(
        fs::metadata(&p).unwrap().mtime(),
        m.mtime(),
        "the target is untouched"
    );
}

/// Setuid and setgid bits go as on Linux: a write or truncate by a user
/// without CAP_FSETID drops them, a chown drops them whoever asks, and
/// setgid stays where group execute is off (it then means mandatory
/// locking). The server does this itself (FUSE_HANDLE_KILLPRIV_V2), so a
/// mount that forgot one of the three would keep a setuid bit here.
pub fn writes_truncates_and_chowns_drop_setuid(root: &Path) {
    if !is_root() {
        return;
    }
    // The other user must be able to reach the mount.
    fs::set_permissions(root.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let make = |name: &str, m: u32| {
        let p = root.join(name);
        fs::write(&p, b"data").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(m)).unwrap();
        assert_eq!(mode(&p), m, "{name} after chmod");
        p
    };
    let as_nobody = |script: &str, p: &Path| {
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(p)
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "`{script}` as nobody on {}: {st}",
            p.display()
        );
    };
    use std::os::unix::process::CommandExt;

    let w = make("written", 0o6777);
    as_nobody("printf x >> \"$0\"", &w);
    assert_eq!(fs::read(&w).unwrap(), b"datax");
    assert_eq!(mode(&w), 0o777, "a write by nobody drops setuid and setgid");

    let l = make("locking", 0o2767);
    as_nobody("printf x >> \"$0\"", &l);
    assert_eq!(mode(&l), 0o2767, "setgid without group execute stays");

    let t = make("truncated", 0o4777);
    as_nobody(": > \"$0\"", &t);
    assert_eq!(fs::metadata(&t).unwrap().len(), 0);
    assert_eq!(mode(&t), 0o777, "a truncate by nobody drops setuid");

    let r = make("by-root", 0o6777);
    OpenOptions::new()
        .append(true)
        .open(&r)
        .unwrap()
        .write_all(b"x")
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&r)
        .unwrap()
        .set_len(1)
        .unwrap();
    assert_eq!(mode(&r), 0o6777, "root (CAP_FSETID) keeps them");

    std::os::unix::fs::chown(&r, Some(1234), Some(5678)).unwrap();
    assert_eq!(mode(&r), 0o777, "a chown drops them, even by root");
    let d = root.join("dir");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o6777)).unwrap();
    std::os::unix::fs::chown(&d, Some(1234), None).unwrap();
    assert_eq!(mode(&d), 0o6777, "but not a directory's");
}

pub fn directory_times_follow_entry_changes(root: &Path) {
    let d = root.join("d");
    fs::create_dir(&d).unwrap();
    let f = d.join("f");
    let steps: [(&str, &dyn Fn()); 4] = [
        ("create", &|| fs::write(&f, b"x").unwrap()),
        ("rename", &|| fs::rename(&f, d.join("g")).unwrap()),
        ("link", &|| fs::hard_link(d.join("g"), &f).unwrap()),
        ("unlink", &|| fs::remove_file(d.join("g")).unwrap()),
    ];
    for (what, step) in steps {
        age(&d);
        step();
        let (mtime, ctime) = mtime_ctime(&d);
        assert!(
            mtime > 1_000_000_000 && ctime > 1_000_000_000,
            "{what} updates the directory's mtime and ctime"
        );
    }
    // The file's own ctime changes when it gains a link.
    age(&f);
    let ctime = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let c0 = ctime(&f);
    std::thread::sleep(Duration::from_millis(20));
    fs::hard_link(&f, d.join("h")).unwrap();
    assert!(ctime(&f) > c0, "link changes ctime");
    // Writing changes mtime and ctime of the file.
    age(&f);
    fs::write(&f, b"more").unwrap();
    let (mtime, ctime) = mtime_ctime(&f);
    assert!(mtime > 1_000_000_000 && ctime > 1_000_000_000);
}

pub fn statfs_is_plausible(root: &Path) {
    let c = cstr(root);
    // SAFETY: statvfs writes into a zeroed struct of the right type.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a struct of the right type to write into.
    check(unsafe { libc::statvfs(c.as_ptr(), &mut s) }).unwrap();
    assert!(s.f_bsize > 0 && s.f_frsize > 0);
    assert!(s.f_blocks > 0 && s.f_bfree <= s.f_blocks && s.f_bavail <= s.f_bfree);
    assert!(s.f_files > 0 && s.f_ffree <= s.f_files);
    assert_eq!(s.f_namemax, 255);
}

pub fn names_longer_than_255_bytes(root: &Path) {
    let ok = root.join("n".repeat(255));
    let long = root.join("n".repeat(256));
    fs::write(&ok, b"").unwrap();
    assert_eq!(
        fs::read_dir(root)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name()
            .len(),
        255
    );
    assert_eq!(errno(fs::write(&long, b"")), libc::ENAMETOOLONG);
    assert_eq!(errno(fs::create_dir(&long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs::metadata(&long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs::rename(&ok, &long)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs::hard_link(&ok, &long)), libc::ENAMETOOLONG);
    assert_eq!(
        errno(std::os::unix::fs::symlink("t", &long)),
        libc::ENAMETOOLONG
    );
    assert!(ok.exists());
}

pub fn unlinked_open_file_stays_readable(root: &Path) {
    let p = root.join("doomed");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all(b"still here").unwrap();
    fs::remove_file(&p).unwrap();
    assert_eq!(errno(fs::metadata(&p)), libc::ENOENT);
    assert_eq!(fs::read_dir(root).unwrap().count(), 0);
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.write_all(b", and growing").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here, and growing");
    // The same name can be reused meanwhile.
    fs::write(&p, b"new").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut buf = [0u8; 5];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"still");
    assert_eq!(fs::read(&p).unwrap(), b"new");
}

pub fn special_files(root: &Path) {
    let fifo = root.join("fifo");
    let c = cstr(&fifo);
    // SAFETY: valid path.
    check(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }).unwrap();
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    let sock = root.join("sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    assert!(fs::symlink_metadata(&sock).unwrap().file_type().is_socket());
    drop(listener);
    if is_root() {
        let dev = root.join("null");
        let c = cstr(&dev);
        let rdev = libc::makedev(1, 3);
        // SAFETY: valid path.
        check(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, rdev) }).unwrap();
        let m = fs::symlink_metadata(&dev).unwrap();
        assert!(m.file_type().is_char_device());
        assert_eq!(m.rdev(), rdev);
    }
}

pub fn fsync_and_fallocate(root: &Path) {
    let p = root.join("f");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    (&f).write_all(b"abc").unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    // SAFETY: valid fd.
    check(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 100_000) }).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 100_000);
    let data = fs::read(&p).unwrap();
    assert_eq!(&data[..3], b"abc");
    assert!(data[3..].iter().all(|&b| b == 0));
    // A directory can be fsynced too.
    File::open(root).unwrap().sync_all().unwrap();
}

/// fallocate(2) with a mode word, on `f`: Ok or the errno.
fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> Result<(), i32> {
    // SAFETY: valid fd; fallocate reads only its integer arguments.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) })
        .map_err(|e| e.raw_os_error().unwrap())
}

/// The modes of fallocate(2) a user of ext4 expects, through the kernel:
/// KEEP_SIZE, PUNCH_HOLE | KEEP_SIZE and ZERO_RANGE (± KEEP_SIZE). A punch
/// reads as zeros, keeps the size and frees its whole blocks (st_blocks, as
/// `du` sees it, drops); the refused words give EOPNOTSUPP.
pub fn fallocate_modes(root: &Path) {
    const B: usize = 4096;
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let punch = libc::FALLOC_FL_PUNCH_HOLE | keep;
    let zero = libc::FALLOC_FL_ZERO_RANGE;
    let p = root.join("f");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    let mut want: Vec<u8> = (0..64 * B).map(|i| (i % 253) as u8 + 1).collect();
    (&f).write_all(&want).unwrap();
    // Everything reaches the file system: st_blocks then counts it all.
    f.sync_all().unwrap();
    // KEEP_SIZE: past the end, the size stays. (Any fallocate also makes
    // the kernel forget the attributes it keeps, st_blocks among them:
    // with its writeback cache they date from before the data was written.)
    fallocate(&f, keep, 60 * B as i64, 100 * B as i64).unwrap();
    assert_eq!(f.metadata().unwrap().len(), want.len() as u64);
    let blocks = |f: &File| f.metadata().unwrap().blocks();
    let full = blocks(&f);
    assert!(full >= 64 * 8, "st_blocks {full} for 64 written blocks");
    // Refused before anything changes.
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, 10),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, B as i64),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(fallocate(&f, punch, 0, 0), Err(libc::EINVAL));

    // A punch from inside block 3 to inside block 35: 31 whole blocks go.
    let (off, len) = (3 * B + 100, 32 * B);
    fallocate(&f, punch, off as i64, len as i64).unwrap();
    want[off..off + len].fill(0);
    assert_eq!(f.metadata().unwrap().len(), want.len() as u64, "KEEP_SIZE");
    assert_eq!(fs::read(&p).unwrap(), want, "after a punch");
    let after = blocks(&f);
    assert_eq!(full - after, 31 * 8, "st_blocks {full} -> {after}");

    // A zero range inside the file, then one that grows it.
    fallocate(&f, zero | keep, 40 * B as i64 + 5, 10).unwrap();
    want[40 * B + 5..40 * B + 15].fill(0);
    fallocate(&f, zero, 63 * B as i64 + 1, 2 * B as i64).unwrap();
    want[63 * B + 1..].fill(0);
    want.resize(65 * B + 1, 0);
    assert_eq!(f.metadata().unwrap().len(), want.len() as u64);
    assert_eq!(fs::read(&p).unwrap(), want, "after zero ranges");
    // Writes into the hole land, the rest of it stays zeros.
    f.write_all_at(b"back", 10 * B as u64).unwrap();
    want[10 * B..10 * B + 4].copy_from_slice(b"back");
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), want, "after a write into the hole");
}
