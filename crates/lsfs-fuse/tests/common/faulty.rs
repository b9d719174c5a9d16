//! `MemFs` with faults a test switches on, to see what the adapter makes
//! of a failing or panicking `Vfs`. Every call is `MemFs`'s otherwise.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use lsfs_vfs::model::MemFs;
use lsfs_vfs::*;

#[derive(Default)]
pub struct FaultyMemFs {
    pub fs: MemFs,
    /// Looking up this name panics inside the `Vfs`.
    pub panic_on_lookup: Option<&'static [u8]>,
    /// Creating a name that starts with this fails with ENOSPC (a full
    /// file system, for the names that ask for it).
    pub nospc_prefix: Option<&'static [u8]>,
    /// Writes fail with this errno while it is not 0; shared, so a test
    /// can switch it while mounted.
    pub write_errno: Arc<AtomicI32>,
    /// `sync` calls so far.
    pub syncs: usize,
}

impl Vfs for FaultyMemFs {
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        assert!(Some(name) != self.panic_on_lookup, "trap sprung");
        self.fs.lookup(parent, name)
    }
    fn forget(&mut self, ino: Ino, nlookup: u64) {
        self.fs.forget(ino, nlookup)
    }
    fn getattr(&mut self, ino: Ino) -> VfsResult<Attr> {
        self.fs.getattr(ino)
    }
    fn setattr(&mut self, ino: Ino, set: &SetAttr) -> VfsResult<Attr> {
        self.fs.setattr(ino, set)
    }
    fn readlink(&mut self, ino: Ino) -> VfsResult<Vec<u8>> {
        self.fs.readlink(ino)
    }
    fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: &Ctx,
    ) -> VfsResult<Attr> {
        if self.nospc_prefix.is_some_and(|p| name.starts_with(p)) {
            return Err(Errno::NOSPC);
        }
        self.fs.mknod(parent, name, mode, rdev, ctx)
    }
    fn mkdir(&mut self, parent: Ino, name: &[u8], mode: u32, ctx: &Ctx) -> VfsResult<Attr> {
        self.fs.mkdir(parent, name, mode, ctx)
    }
    fn unlink(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.fs.unlink(parent, name)
    }
    fn rmdir(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        self.fs.rmdir(parent, name)
    }
    fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], ctx: &Ctx) -> VfsResult<Attr> {
        self.fs.symlink(parent, name, target, ctx)
    }
    fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<()> {
        self.fs.rename(parent, name, newparent, newname, flags)
    }
    fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> VfsResult<Attr> {
        self.fs.link(ino, newparent, newname)
    }
    fn open(&mut self, ino: Ino, flags: i32) -> VfsResult<()> {
        self.fs.open(ino, flags)
    }
    fn release(&mut self, ino: Ino) {
        self.fs.release(ino)
    }
    fn read(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.fs.read(ino, offset, size)
    }
    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32> {
        match self.write_errno.load(Ordering::SeqCst) {
            0 => self.fs.write(ino, offset, data),
            e => Err(Errno(e)),
        }
    }
    fn fsync(&mut self, ino: Ino, datasync: bool) -> VfsResult<()> {
        self.fs.fsync(ino, datasync)
    }
    fn readdir(&mut self, ino: Ino, offset: u64, max_entries: usize) -> VfsResult<Vec<DirEntry>> {
        self.fs.readdir(ino, offset, max_entries)
    }
    fn statfs(&mut self) -> VfsResult<StatFs> {
        self.fs.statfs()
    }
    fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> VfsResult<()> {
        self.fs.setxattr(ino, name, value, flags)
    }
    fn getxattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>> {
        self.fs.getxattr(ino, name)
    }
    fn listxattr(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>> {
        self.fs.listxattr(ino)
    }
    fn removexattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<()> {
        self.fs.removexattr(ino, name)
    }
    fn fallocate(&mut self, ino: Ino, offset: u64, length: u64, mode: i32) -> VfsResult<()> {
        self.fs.fallocate(ino, offset, length, mode)
    }
    fn sync(&mut self) -> VfsResult<()> {
        self.syncs += 1;
        self.fs.sync()
    }
    fn read_only(&self) -> bool {
        self.fs.read_only()
    }
}
