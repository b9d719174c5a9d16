//! Namespace and metadata changes, as both the operations (`Vfs` in
//! `mod.rs`) and recovery's replay of the operation log (`replay.rs`) make
//! them: the checks that decide an operation's outcome, then the change.
//! Neither part checkpoints, reserves space or takes kernel references;
//! the operations do that around them, so that replaying a logged change
//! gives exactly what the change gave (the times aside: the inode images
//! logged with the changes set those afterwards).

use super::{dir, file, xattr, Lsfs};
use crate::fs::inode::Inode;
use crate::layout::ROOT_INO;
use lsfs_vfs::{Errno, FileKind, Timespec, VfsResult, RENAME_EXCHANGE, RENAME_NOREPLACE};

/// A rename that passed its checks: the source entry and the one it
/// replaces or exchanges with, if any.
pub(super) struct RenamePlan {
    pub src: dir::Entry,
    pub dst: Option<dir::Entry>,
}

impl Lsfs {
    /// Create inode `ino` named `name` in directory `parent` (mknod, mkdir,
    /// symlink with `target`). The caller checked that the name is free and
    /// valid and that `ino` is unused.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_apply(
        &mut self,
        parent: u64,
        name: &[u8],
        ino: u64,
        mode: u32,
        (uid, gid, rdev): (u32, u32, u32),
        target: &[u8],
        now: Timespec,
    ) -> VfsResult<Inode> {
        let mut d = self.live_dir(parent)?;
        self.store.inode_created();
        let mut inode = Inode::new(ino, mode, uid, gid, now);
        inode.rdev = rdev;
        dir::insert(&mut self.store, &mut d, name, ino, inode.kind())?;
        if inode.kind() == FileKind::Dir {
            d.nlink += 1;
        }
        d.mtime = now;
        d.ctime = now;
        self.put(d);
        if !target.is_empty() {
            file::write(&mut self.store, &mut inode, 0, target)?;
        }
        self.put(inode);
        if FileKind::from_mode(mode) == Some(FileKind::Dir) {
            self.set_dotdot(ino, parent)?;
        }
        self.get(ino).map_err(Errno::from)
    }

    /// Whether inode `ino` may get the name `newname` in `newparent`.
    pub(super) fn link_checks(
        &mut self,
        ino: u64,
        newparent: u64,
        newname: &[u8],
    ) -> VfsResult<()> {
        let i = self.get(ino)?;
        if i.kind() == FileKind::Dir {
            return Err(Errno::PERM);
        }
        if i.nlink == 0 {
            // Unlinked but still open: it sits in the orphan directory and is
            // deleted at the next mount, so it must not get a name (Linux: ENOENT).
            return Err(Errno::NOENT);
        }
        if i.nlink >= 65000 {
            return Err(Errno::MLINK);
        }
        let d = self.live_dir(newparent)?;
        if dir::lookup(&mut self.store, &d, newname)?.is_some() {
            return Err(Errno::EXIST);
        }
        Ok(())
    }

    pub(super) fn link_apply(
        &mut self,
        ino: u64,
        newparent: u64,
        newname: &[u8],
        now: Timespec,
    ) -> VfsResult<Inode> {
        let mut d = self.live_dir(newparent)?;
        let mut i = self.get(ino)?;
        dir::insert(&mut self.store, &mut d, newname, ino, i.kind())?;
        d.mtime = now;
        d.ctime = now;
        self.put(d);
        i.nlink += 1;
        i.ctime = now;
        self.put(i.clone());
        Ok(i)
    }

    /// The entry `unlink(parent, name)` removes.
    pub(super) fn unlink_checks(&mut self, parent: u64, name: &[u8]) -> VfsResult<dir::Entry> {
        let d = self.dir_inode(parent)?;
        let ent = dir::lookup(&mut self.store, &d, name)?.ok_or(Errno::NOENT)?;
        if ent.kind == FileKind::Dir {
            return Err(Errno::ISDIR);
        }
        Ok(ent)
    }

    pub(super) fn unlink_apply(
        &mut self,
        parent: u64,
        name: &[u8],
        ent: &dir::Entry,
        now: Timespec,
    ) -> VfsResult<()> {
        let mut d = self.dir_inode(parent)?;
        dir::remove(&mut self.store, &mut d, name)?;
        d.mtime = now;
        d.ctime = now;
        self.put(d);
        let mut i = self.get(ent.ino)?;
        i.nlink = i.nlink.saturating_sub(1);
        i.ctime = now;
        self.put(i);
        self.drop_link(ent.ino).map_err(Errno::from)
    }

    /// The empty directory `rmdir(parent, name)` removes.
    pub(super) fn rmdir_checks(&mut self, parent: u64, name: &[u8]) -> VfsResult<dir::Entry> {
        let d = self.dir_inode(parent)?;
        let ent = dir::lookup(&mut self.store, &d, name)?.ok_or(Errno::NOENT)?;
        if ent.kind != FileKind::Dir {
            return Err(Errno::NOTDIR);
        }
        if self.get(ent.ino)?.size > 0 {
            return Err(Errno::NOTEMPTY);
        }
        Ok(ent)
    }

    pub(super) fn rmdir_apply(
        &mut self,
        parent: u64,
        name: &[u8],
        ent: &dir::Entry,
        now: Timespec,
    ) -> VfsResult<()> {
        let mut d = self.dir_inode(parent)?;
        let mut victim = self.get(ent.ino)?;
        let _ = dir::remove(&mut self.store, &mut victim, b"..")?;
        dir::remove(&mut self.store, &mut d, name)?;
        d.nlink = d.nlink.saturating_sub(1);
        d.mtime = now;
        d.ctime = now;
        self.put(d);
        victim.nlink = 0;
        victim.ctime = now;
        victim.size = 0;
        self.put(victim);
        self.drop_link(ent.ino).map_err(Errno::from)
    }

    /// Check a rename; `None` if it changes nothing (both names are one inode).
    pub(super) fn rename_checks(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<Option<RenamePlan>> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::INVAL);
        }
        if name == b"." || name == b".." || newname == b"." || newname == b".." {
            return Err(if name == b"." || newname == b"." {
                Errno::INVAL
            } else {
                Errno::BUSY
            });
        }
        super::check_name(name)?;
        super::check_name(newname)?;
        self.check_reserved(newparent, newname)?;
        self.check_reserved(parent, name)?;
        let src = self.lookup_entry(parent, name)?.ok_or(Errno::NOENT)?;
        let dst = self.lookup_entry(newparent, newname)?;
        self.live_dir(newparent)?;
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(Errno::EXIST);
        }
        if flags & RENAME_EXCHANGE != 0 && dst.is_none() {
            return Err(Errno::NOENT);
        }
        if let Some(d) = &dst {
            if d.ino == src.ino {
                return Ok(None); // same inode: POSIX says do nothing
            }
        }
        // No directory may move into its own subtree.
        if src.kind == FileKind::Dir && self.is_ancestor(src.ino, newparent)? {
            return Err(Errno::INVAL);
        }
        // Nor may a directory be replaced by something inside it (Linux: ENOTEMPTY).
        if let Some(d) = dst.as_ref().filter(|_| flags & RENAME_EXCHANGE == 0) {
            if d.kind == FileKind::Dir && self.is_ancestor(d.ino, parent)? {
                return Err(Errno::NOTEMPTY);
            }
        }
        if flags & RENAME_EXCHANGE != 0 {
            let d = dst.as_ref().expect("checked");
            if d.kind == FileKind::Dir && self.is_ancestor(d.ino, parent)? {
                return Err(Errno::INVAL);
            }
        }
        Ok(Some(RenamePlan { src, dst }))
    }

    /// Make a checked rename; returns the inodes it changed.
    pub(super) fn rename_apply(
        &mut self,
        (parent, name): (u64, &[u8]),
        (newparent, newname): (u64, &[u8]),
        flags: u32,
        plan: RenamePlan,
        now: Timespec,
    ) -> VfsResult<Vec<u64>> {
        let RenamePlan { src, dst } = plan;
        if flags & RENAME_EXCHANGE != 0 {
            let d = dst.expect("checked");
            return self.rename_exchange(parent, newparent, src, d, now);
        }
        if let Some(d) = &dst {
            match (src.kind == FileKind::Dir, d.kind == FileKind::Dir) {
                (true, false) => return Err(Errno::NOTDIR),
                (false, true) => return Err(Errno::ISDIR),
                (true, true) if self.get(d.ino)?.size > 0 => {
                    return Err(Errno::NOTEMPTY);
                }
                _ => {}
            }
        }
        self.rename_unlink_source(parent, name, &src, now)?;
        self.rename_link_target(newparent, newname, &src, dst.as_ref(), now)?;
        if src.kind == FileKind::Dir && parent != newparent {
            self.set_dotdot(src.ino, newparent)?;
        }
        self.touch_ctime(src.ino, now)?;
        let mut touched = vec![parent, newparent, src.ino];
        if let Some(d) = dst {
            self.rename_release_replaced(&d, now)?;
            touched.push(d.ino);
        }
        Ok(touched)
    }

    /// RENAME_EXCHANGE: each name now points at the other's inode; when a
    /// directory and a non-directory trade parents, the parents' link counts
    /// follow the directory.
    fn rename_exchange(
        &mut self,
        parent: u64,
        newparent: u64,
        src: dir::Entry,
        d: dir::Entry,
        now: Timespec,
    ) -> VfsResult<Vec<u64>> {
        let mut pd = self.dir_inode(parent)?;
        dir::replace(&mut self.store, &mut pd, &src, d.ino, d.kind)?;
        pd.mtime = now;
        pd.ctime = now;
        if parent != newparent && src.kind != d.kind {
            if src.kind == FileKind::Dir {
                pd.nlink = pd.nlink.saturating_sub(1);
            } else if d.kind == FileKind::Dir {
                pd.nlink += 1;
            }
        }
        self.put(pd);
        let mut nd = self.dir_inode(newparent)?;
        dir::replace(&mut self.store, &mut nd, &d, src.ino, src.kind)?;
        nd.mtime = now;
        nd.ctime = now;
        if parent != newparent && src.kind != d.kind {
            if src.kind == FileKind::Dir {
                nd.nlink += 1;
            } else if d.kind == FileKind::Dir {
                nd.nlink = nd.nlink.saturating_sub(1);
            }
        }
        self.put(nd);
        if src.kind == FileKind::Dir {
            self.set_dotdot(src.ino, newparent)?;
        }
        if d.kind == FileKind::Dir {
            self.set_dotdot(d.ino, parent)?;
        }
        self.touch_ctime(src.ino, now)?;
        self.touch_ctime(d.ino, now)?;
        Ok(vec![parent, newparent, src.ino, d.ino])
    }

    /// Remove the source entry; a directory moving out takes its `..` link
    /// from the old parent.
    fn rename_unlink_source(
        &mut self,
        parent: u64,
        name: &[u8],
        src: &dir::Entry,
        now: Timespec,
    ) -> VfsResult<()> {
        let mut pd = self.dir_inode(parent)?;
        dir::remove(&mut self.store, &mut pd, name)?;
        pd.mtime = now;
        pd.ctime = now;
        if src.kind == FileKind::Dir {
            pd.nlink = pd.nlink.saturating_sub(1);
        }
        self.put(pd);
        Ok(())
    }

    /// Point the target name at the source inode, replacing `dst` if there
    /// is one; the new parent gains the `..` link of a directory moving in
    /// and loses that of a directory replaced.
    fn rename_link_target(
        &mut self,
        newparent: u64,
        newname: &[u8],
        src: &dir::Entry,
        dst: Option<&dir::Entry>,
        now: Timespec,
    ) -> VfsResult<()> {
        let mut nd = self.dir_inode(newparent)?;
        match dst {
            Some(d) => {
                dir::replace(&mut self.store, &mut nd, d, src.ino, src.kind)?;
                if d.kind == FileKind::Dir {
                    nd.nlink = nd.nlink.saturating_sub(1);
                }
            }
            None => dir::insert(&mut self.store, &mut nd, newname, src.ino, src.kind)?,
        }
        if src.kind == FileKind::Dir {
            nd.nlink += 1;
        }
        nd.mtime = now;
        nd.ctime = now;
        self.put(nd);
        Ok(())
    }

    /// The inode a rename replaced loses its name: a directory (empty, as
    /// checked) loses everything, anything else one link.
    fn rename_release_replaced(&mut self, d: &dir::Entry, now: Timespec) -> VfsResult<()> {
        let mut v = self.get(d.ino)?;
        if v.kind() == FileKind::Dir {
            let _ = dir::remove(&mut self.store, &mut v, b"..")?;
            v.nlink = 0;
            v.size = 0;
        } else {
            v.nlink = v.nlink.saturating_sub(1);
        }
        v.ctime = now;
        self.put(v);
        self.drop_link(d.ino).map_err(Errno::from)
    }

    pub(super) fn setxattr_apply(
        &mut self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        now: Timespec,
    ) -> VfsResult<()> {
        let mut i = self.get(ino)?;
        xattr::set(&mut self.store, &mut i, name, value, flags)?;
        self.note_nocompress(ino, name, true);
        i.ctime = now;
        self.put(i);
        Ok(())
    }

    pub(super) fn removexattr_apply(
        &mut self,
        ino: u64,
        name: &[u8],
        now: Timespec,
    ) -> VfsResult<()> {
        let mut i = self.get(ino)?;
        xattr::remove(&mut self.store, &mut i, name)?;
        self.note_nocompress(ino, name, false);
        i.ctime = now;
        self.put(i);
        Ok(())
    }

    fn touch_ctime(&mut self, ino: u64, now: Timespec) -> crate::error::Result<()> {
        let mut i = self.get(ino)?;
        i.ctime = now;
        self.put(i);
        Ok(())
    }

    /// Whether `anc` is `ino` or one of its ancestors.
    fn is_ancestor(&mut self, anc: u64, mut ino: u64) -> VfsResult<bool> {
        for _ in 0..4096 {
            if ino == anc {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            let d = self.dir_inode(ino)?;
            ino = match dir::lookup(&mut self.store, &d, b"..")? {
                Some(p) => p.ino,
                None => return Ok(false),
            };
        }
        Err(Errno::LOOP)
    }
}
