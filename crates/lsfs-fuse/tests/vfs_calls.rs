//! What the adapter asks of the `Vfs` beyond single requests (a sync at
//! unmount), and what users see when the `Vfs` fails: its errno, or EIO
//! after a panic (the mount stays up and unmounts cleanly, no hang).

mod common;

use std::fs;

use common::{fuse_available, TestMount};
use lsfs_vfs::model::MemFs;
use lsfs_vfs::*;

/// `MemFs` with booby traps (looking up "boom" panics, creating "full*"
/// fails with ENOSPC) and a count of `sync` calls.
struct Trapped(MemFs, usize);

impl Vfs for Trapped {
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        assert!(name != b"boom", "trap sprung");
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
        // A full file system, for names that ask for it.
        if name.starts_with(b"full") {
            return Err(Errno::NOSPC);
        }
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
    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.0.write(ino, offset, data)
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
        self.1 += 1;
        self.0.sync()
    }
    fn read_only(&self) -> bool {
        self.0.read_only()
    }
}

#[test]
fn vfs_errors_reach_the_caller_and_a_panic_becomes_eio() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(Trapped(MemFs::new(), 0));
    let root = mount.root();
    fs::write(root.join("before"), b"ok").unwrap();
    assert_eq!(
        fs::write(root.join("full-disk"), b"")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOSPC)
    );
    assert_eq!(
        fs::metadata(root.join("boom")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    // The state may be inconsistent after a panic: every later request
    // fails too, visibly, rather than serving possibly wrong data. (What
    // the kernel cached before the panic, such as the contents of "before",
    // it still serves without asking: that was right when it was cached.)
    assert_eq!(
        fs::metadata(root.join("after")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(
        fs::write(root.join("before"), b"changed")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EIO)
    );
    assert!(mount.vfs.is_poisoned());
    mount.unmount();
}

#[test]
fn unmount_syncs_the_vfs() {
    if !fuse_available() {
        return;
    }
    let mount = TestMount::new(Trapped(MemFs::new(), 0));
    fs::write(mount.root().join("f"), b"data").unwrap();
    let vfs = mount.vfs.clone();
    assert_eq!(vfs.lock().unwrap().1, 0);
    mount.unmount();
    assert_eq!(vfs.lock().unwrap().1, 1, "one sync at unmount");
}
