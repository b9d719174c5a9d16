//! Where a write error (ENOSPC, EIO) reaches the application, with the
//! kernel's writeback cache and without, as docs/CRASH.md states it:
//! without it at write(); with it write() only fills the page cache, and
//! the error comes back from fsync() and from close() (the kernel writes
//! the file's dirty pages back at close and reports their error there).

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::io::IntoRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use common::{fuse_available, TestMount};
use lsfs_fuse::MountOptions;
use lsfs_vfs::model::MemFs;
use lsfs_vfs::*;

/// `MemFs` whose writes fail with the errno in `fail` while it is not 0.
struct FailingWrites(MemFs, Arc<AtomicI32>);

impl Vfs for FailingWrites {
    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32> {
        match self.1.load(Ordering::SeqCst) {
            0 => self.0.write(ino, offset, data),
            e => Err(Errno(e)),
        }
    }
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        self.0.lookup(parent, name)
    }
    fn forget(&mut self, ino: Ino, nlookup: u64) {
        self.0.forget(ino, nlookup)
    }
    fn getattr(&mut self, ino: Ino) -> VfsResult<Attr> {
        self.0.getattr(ino)
    }
    fn setattr(&mut self, ino: Ino, set: &SetAttr) -> VfsResult<Attr> {
        self.0.setattr(ino, set)
    }
    fn readlink(&mut self, ino: Ino) -> VfsResult<Vec<u8>> {
        self.0.readlink(ino)
    }
    fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: &Ctx,
    ) -> VfsResult<Attr> {
        self.0.mknod(parent, name, mode, rdev, ctx)
    }
    fn mkdir(&mut self, parent: Ino, name: &[u8], mode: u32, ctx: &Ctx) -> VfsResult<Attr> {
        self.0.mkdir(parent, name, mode, ctx)
    }
    fn unlink(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.0.unlink(parent, name)
    }
    fn rmdir(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.0.rmdir(parent, name)
    }
    fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], ctx: &Ctx) -> VfsResult<Attr> {
        self.0.symlink(parent, name, target, ctx)
    }
    fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<()> {
        self.0.rename(parent, name, newparent, newname, flags)
    }
    fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> VfsResult<Attr> {
        self.0.link(ino, newparent, newname)
    }
    fn open(&mut self, ino: Ino, flags: i32) -> VfsResult<()> {
        self.0.open(ino, flags)
    }
    fn release(&mut self, ino: Ino) {
        self.0.release(ino)
    }
    fn read(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.0.read(ino, offset, size)
    }
    fn fsync(&mut self, ino: Ino, datasync: bool) -> VfsResult<()> {
        self.0.fsync(ino, datasync)
    }
    fn readdir(&mut self, ino: Ino, offset: u64, max_entries: usize) -> VfsResult<Vec<DirEntry>> {
        self.0.readdir(ino, offset, max_entries)
    }
    fn statfs(&mut self) -> VfsResult<StatFs> {
        self.0.statfs()
    }
    fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> VfsResult<()> {
        self.0.setxattr(ino, name, value, flags)
    }
    fn getxattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>> {
        self.0.getxattr(ino, name)
    }
    fn listxattr(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>> {
        self.0.listxattr(ino)
    }
    fn removexattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<()> {
        self.0.removexattr(ino, name)
    }
    fn fallocate(&mut self, ino: Ino, offset: u64, length: u64, mode: i32) -> VfsResult<()> {
        self.0.fallocate(ino, offset, length, mode)
    }
    fn sync(&mut self) -> VfsResult<()> {
        self.0.sync()
    }
    fn read_only(&self) -> bool {
        self.0.read_only()
    }
}

fn mount(writeback_cache: bool) -> (TestMount<FailingWrites>, Arc<AtomicI32>) {
    let fail = Arc::new(AtomicI32::new(0));
    let opts = MountOptions {
        fsname: "lsfs-test".into(),
        writeback_cache,
        ..MountOptions::default()
    };
    (
        TestMount::with_options(FailingWrites(MemFs::new(), fail.clone()), &opts),
        fail,
    )
}

/// close(2) itself, whose result `File`'s drop throws away.
fn close(f: fs::File) -> Result<(), i32> {
    // SAFETY: the descriptor is ours and closed exactly once.
    match unsafe { libc::close(f.into_raw_fd()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
    }
}

#[test]
fn without_the_writeback_cache_write_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(false);
        let mut f = fs::File::create(mount.root().join("f")).unwrap();
        fail.store(e, Ordering::SeqCst);
        let r = f.write_all(&[1; 8192]);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(e));
        fail.store(0, Ordering::SeqCst);
        drop(f);
        mount.unmount();
    }
}

#[test]
fn with_the_writeback_cache_fsync_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(true);
        let mut f = fs::File::create(mount.root().join("f")).unwrap();
        fail.store(e, Ordering::SeqCst);
        f.write_all(&[1; 8192])
            .expect("write() only fills the page cache");
        assert_eq!(f.sync_all().unwrap_err().raw_os_error(), Some(e));
        fail.store(0, Ordering::SeqCst);
        drop(f);
        mount.unmount();
    }
}

#[test]
fn with_the_writeback_cache_close_reports_the_error() {
    if !fuse_available() {
        return;
    }
    for e in [libc::ENOSPC, libc::EIO] {
        let (mount, fail) = mount(true);
        let p = mount.root().join("f");
        let mut f = fs::File::create(&p).unwrap();
        fail.store(e, Ordering::SeqCst);
        f.write_all(&[1; 8192])
            .expect("write() only fills the page cache");
        assert_eq!(
            close(f),
            Err(e),
            "close() must report the failed write-back"
        );
        // Once reported, the error is not reported again.
        fail.store(0, Ordering::SeqCst);
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert_eq!(close(f), Ok(()));
        mount.unmount();
    }
}
