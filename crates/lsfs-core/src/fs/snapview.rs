//! Snapshots browsable in the live mount, read-only, as ZFS's
//! `.zfs/snapshot`: `/.lsfs/snapshot/<cno>/` is the root directory of
//! snapshot `cno`. `.lsfs` is hidden (not listed by readdir) but can be
//! looked up and entered.
//!
//! Inode numbers of the live file system stay below 2^48. `.lsfs` and
//! `.lsfs/snapshot` are 2^48 and 2^48 + 1; inode `i` of the snapshot in view
//! slot `s` is `((s + 2) << 48) | i`. Slots are handed out on first lookup.

use crate::error::{Error, Result};
use crate::fs::{dir, file, inode::Inode, xattr};
use crate::layout::{MAX_INO, ROOT_INO};
use crate::meta::store::Store;
use lsfs_vfs::{Attr, DirEntry, Errno, FileKind, Timespec};

pub const CTL_NAME: &[u8] = b".lsfs";
pub const SNAPSHOT_DIR_NAME: &[u8] = b"snapshot";
pub const CTL_INO: u64 = MAX_INO;
pub const SNAPSHOT_DIR_INO: u64 = MAX_INO + 1;
const SLOT_SHIFT: u32 = 48;
/// View slots: one per snapshot browsed since mount.
const SLOTS_MAX: usize = (1 << 16) - 3;

#[derive(Default)]
pub struct Views {
    slots: Vec<u64>,
    pub mounted_at: Timespec,
}

pub fn is_virtual(ino: u64) -> bool {
    ino >= MAX_INO
}

fn encode(slot: usize, ino: u64) -> u64 {
    ((slot as u64 + 2) << SLOT_SHIFT) | ino
}

impl Views {
    pub fn new(mounted_at: Timespec) -> Views {
        Views {
            slots: Vec::new(),
            mounted_at,
        }
    }

    fn decode(&self, ino: u64) -> Option<(usize, u64)> {
        let hi = (ino >> SLOT_SHIFT) as usize;
        (hi >= 2).then(|| (hi - 2, ino & (MAX_INO - 1)))
    }

    fn slot_for(&mut self, cno: u64) -> Result<usize> {
        if let Some(i) = self.slots.iter().position(|&c| c == cno) {
            return Ok(i);
        }
        if self.slots.len() >= SLOTS_MAX {
            return Err(Error::Errno(Errno(libc::ENFILE)));
        }
        self.slots.push(cno);
        Ok(self.slots.len() - 1)
    }

    fn dir_attr(&self, ino: u64) -> Attr {
        let t = self.mounted_at;
        Attr {
            ino,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileKind::Dir,
            perm: 0o555,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    /// The IFILE root of the snapshot a view inode belongs to; ESTALE once
    /// the checkpoint is gone.
    fn root_of(&self, s: &Store, slot: usize) -> Result<u64> {
        let cno = *self
            .slots
            .get(slot)
            .ok_or(Error::Errno(Errno(libc::ESTALE)))?;
        s.cps()
            .entries
            .get(&cno)
            .map(|c| c.ifile_root)
            .ok_or(Error::Errno(Errno(libc::ESTALE)))
    }

    /// A snapshot's inode, with its number as the live mount shows it.
    pub fn inode(&self, s: &mut Store, ino: u64) -> Result<(Inode, usize)> {
        let (slot, real) = self.decode(ino).ok_or(Error::Errno(Errno::NOENT))?;
        let root = self.root_of(s, slot)?;
        let img = s
            .inode_read(root, real)?
            .ok_or(Error::Errno(Errno::NOENT))?;
        Ok((Inode::decode(&img, real)?, slot))
    }

    pub fn getattr(&mut self, s: &mut Store, ino: u64) -> Result<Attr> {
        match ino {
            CTL_INO | SNAPSHOT_DIR_INO => Ok(self.dir_attr(ino)),
            _ => {
                let (i, slot) = self.inode(s, ino)?;
                let mut a = i.attr();
                a.ino = encode(slot, i.ino);
                Ok(a)
            }
        }
    }

    pub fn lookup(&mut self, s: &mut Store, parent: u64, name: &[u8]) -> Result<Attr> {
        match parent {
            CTL_INO if name == SNAPSHOT_DIR_NAME => Ok(self.dir_attr(SNAPSHOT_DIR_INO)),
            CTL_INO => Err(Error::Errno(Errno::NOENT)),
            SNAPSHOT_DIR_INO => {
                let cno: u64 = std::str::from_utf8(name)
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or(Error::Errno(Errno::NOENT))?;
                if !s.cps().entries.get(&cno).is_some_and(|c| c.is_snapshot()) {
                    return Err(Error::Errno(Errno::NOENT));
                }
                let slot = self.slot_for(cno)?;
                self.getattr(s, encode(slot, ROOT_INO))
            }
            _ => {
                let (d, slot) = self.inode(s, parent)?;
                if d.kind() != FileKind::Dir {
                    return Err(Error::Errno(Errno::NOTDIR));
                }
                let target = if name == b"." {
                    d.ino
                } else {
                    dir::lookup(s, &d, name)?
                        .ok_or(Error::Errno(Errno::NOENT))?
                        .ino
                };
                self.getattr(s, encode(slot, target))
            }
        }
    }

    pub fn readdir(
        &mut self,
        s: &mut Store,
        ino: u64,
        offset: u64,
        max: usize,
    ) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        match ino {
            CTL_INO => {
                dots(&mut out, offset, CTL_INO, ROOT_INO);
                if offset < 3 {
                    out.push(DirEntry {
                        ino: SNAPSHOT_DIR_INO,
                        offset: 3,
                        kind: FileKind::Dir,
                        name: SNAPSHOT_DIR_NAME.to_vec(),
                    });
                }
            }
            SNAPSHOT_DIR_INO => {
                dots(&mut out, offset, SNAPSHOT_DIR_INO, CTL_INO);
                self.list_snapshots(s, offset, &mut out)?;
            }
            _ => self.list_dir(s, ino, offset, max, &mut out)?,
        }
        out.truncate(max);
        Ok(out)
    }

    /// The snapshot directory: one entry per snapshot, named by its number.
    fn list_snapshots(
        &mut self,
        s: &mut Store,
        offset: u64,
        out: &mut Vec<DirEntry>,
    ) -> Result<()> {
        for cno in s.cps().snapshots() {
            // Cookie: cno + 3, stable while snapshots come and go.
            if cno + 3 > offset {
                let slot = self.slot_for(cno)?;
                out.push(DirEntry {
                    ino: encode(slot, ROOT_INO),
                    offset: cno + 3,
                    kind: FileKind::Dir,
                    name: cno.to_string().into_bytes(),
                });
            }
        }
        Ok(())
    }

    /// A directory inside a snapshot; its root's `..` is the snapshot
    /// directory.
    fn list_dir(
        &mut self,
        s: &mut Store,
        ino: u64,
        offset: u64,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) -> Result<()> {
        let (d, slot) = self.inode(s, ino)?;
        if d.kind() != FileKind::Dir {
            return Err(Error::Errno(Errno::NOTDIR));
        }
        let parent = match dir::lookup(s, &d, b"..")? {
            Some(p) => encode(slot, p.ino),
            None => SNAPSHOT_DIR_INO,
        };
        dots(out, offset, ino, parent);
        for (c, e) in dir::list_after(s, &d, offset, max)? {
            if e.name != b".." {
                out.push(DirEntry {
                    ino: encode(slot, e.ino),
                    offset: c,
                    kind: e.kind,
                    name: e.name,
                });
            }
        }
        Ok(())
    }

    pub fn read(&mut self, s: &mut Store, ino: u64, off: u64, len: u64) -> Result<Vec<u8>> {
        let (i, _) = self.inode(s, ino)?;
        if i.kind() == FileKind::Dir {
            return Err(Error::Errno(Errno::ISDIR));
        }
        file::read(s, &i, off, len)
    }

    /// `.lsfs` and `.lsfs/snapshot` exist only in memory and have no
    /// xattrs: ENODATA, as for any file without the name (`ls -l` asks).
    pub fn getxattr(&mut self, s: &mut Store, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        if matches!(ino, CTL_INO | SNAPSHOT_DIR_INO) {
            return Err(Error::Errno(Errno::NODATA));
        }
        let (i, _) = self.inode(s, ino)?;
        xattr::get(s, &i, name)?.ok_or(Error::Errno(Errno::NODATA))
    }

    pub fn listxattr(&mut self, s: &mut Store, ino: u64) -> Result<Vec<Vec<u8>>> {
        if matches!(ino, CTL_INO | SNAPSHOT_DIR_INO) {
            return Ok(Vec::new());
        }
        let (i, _) = self.inode(s, ino)?;
        xattr::list(s, &i)
    }
}

/// The `.` and `..` entries of directory `me`, those past `offset`.
fn dots(out: &mut Vec<DirEntry>, offset: u64, me: u64, parent: u64) {
    if offset < dir::COOKIE_DOT {
        out.push(DirEntry {
            ino: me,
            offset: dir::COOKIE_DOT,
            kind: FileKind::Dir,
            name: b".".to_vec(),
        });
    }
    if offset < dir::COOKIE_DOTDOT {
        out.push(DirEntry {
            ino: parent,
            offset: dir::COOKIE_DOTDOT,
            kind: FileKind::Dir,
            name: b"..".to_vec(),
        });
    }
}
