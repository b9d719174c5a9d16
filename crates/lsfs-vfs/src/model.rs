//! An in-memory reference file system: the model that tests compare lsfs with.
//!
//! [`MemFs`] favours being obviously correct over being fast: every inode sits
//! in one map, directories are sorted maps of names, and file data is a map of
//! 4 KiB pages (absent pages read as zeros, so sparse files cost nothing).
//!
//! Semantics follow Linux where POSIX leaves room (see the unit tests). Two
//! things are left to the caller, as the kernel does them for FUSE:
//! permission checks and clearing setuid/setgid bits on write and chown.
//! Access times change only through `setattr` (like `noatime`), so that the
//! model and the engine agree without modelling `relatime`.

use std::collections::{BTreeMap, HashMap};

use crate::{
    Attr, Ctx, DirEntry, Errno, FallocMode, FileKind, Ino, SetAttr, StatFs, TimeSet, Timespec, Vfs,
    VfsResult, NAME_MAX_BYTES, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO, SYMLINK_MAX_BYTES,
    XATTR_CREATE, XATTR_REPLACE,
};

/// Page size of file data, also the reported block size.
const PAGE: u64 = 4096;
/// Largest file size; larger writes and truncates fail with EFBIG.
pub const MAX_FILE_SIZE: u64 = 1 << 44;
/// Most hard links one inode may have (ext4's limit).
pub const MAX_LINKS: u32 = 65000;
/// Longest extended attribute name and value (Linux's limits).
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
/// The capacity `statfs` reports; nothing enforces it.
const TOTAL_BLOCKS: u64 = 1 << 20;
const TOTAL_INODES: u64 = 1 << 20;
/// Cookies of "." and ".."; real entries start after them.
const DOT_COOKIE: u64 = 1;
const DOTDOT_COOKIE: u64 = 2;

/// Where timestamps come from; tests inject a deterministic clock.
pub type Clock = Box<dyn FnMut() -> Timespec + Send>;

/// A directory: entries by name, and the same entries by cookie so that
/// `readdir` can resume after any cookie no matter what changed since.
#[derive(Debug)]
struct Dir {
    parent: Ino,
    by_name: BTreeMap<Vec<u8>, (Ino, u64)>,
    by_cookie: BTreeMap<u64, Vec<u8>>,
    /// Cookies are never reused, so a stale cookie cannot skip a new entry.
    next_cookie: u64,
}

impl Dir {
    fn new(parent: Ino) -> Dir {
        Dir {
            parent,
            by_name: BTreeMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: DOTDOT_COOKIE + 1,
        }
    }

    fn get(&self, name: &[u8]) -> Option<Ino> {
        self.by_name.get(name).map(|&(ino, _)| ino)
    }

    fn insert(&mut self, name: &[u8], ino: Ino) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let old = self.by_name.insert(name.to_vec(), (ino, cookie));
        debug_assert!(old.is_none(), "insert over an existing entry");
        self.by_cookie.insert(cookie, name.to_vec());
    }

    fn remove(&mut self, name: &[u8]) -> Option<Ino> {
        let (ino, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    /// Point an existing entry at another inode, keeping its cookie (the name
    /// stayed, so a reader must neither lose nor repeat it).
    fn replace(&mut self, name: &[u8], ino: Ino) {
        let slot = self
            .by_name
            .get_mut(name)
            .expect("replace of a missing entry");
        slot.0 = ino;
    }
}

#[derive(Debug)]
enum Content {
    /// Logical size, and the pages that hold data; the rest reads as zeros.
    File {
        size: u64,
        pages: BTreeMap<u64, Box<[u8]>>,
    },
    Dir(Dir),
    Symlink(Vec<u8>),
    /// Fifos, sockets and device nodes: no content, only a device number
    /// (0 unless a device).
    Special {
        rdev: u32,
    },
}

#[derive(Debug)]
struct Inode {
    kind: FileKind,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    crtime: Timespec,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// References held by the kernel (lookup-like calls minus forgets).
    lookups: u64,
    /// Open handles (open minus release).
    opens: u64,
    content: Content,
}

impl Inode {
    fn dir(&self) -> Option<&Dir> {
        match &self.content {
            Content::Dir(d) => Some(d),
            _ => None,
        }
    }

    fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.content {
            Content::Dir(d) => Some(d),
            _ => None,
        }
    }
}

/// The in-memory reference file system.
pub struct MemFs {
    inodes: HashMap<Ino, Inode>,
    /// Inode numbers are never reused, which keeps the model free of
    /// generation numbers.
    next_ino: Ino,
    clock: Clock,
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::new()
    }
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs")
            .field("inodes", &self.inodes.len())
            .field("next_ino", &self.next_ino)
            .finish()
    }
}

/// Rejects names no directory may hold.
fn check_name(name: &[u8]) -> VfsResult<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(Errno::NAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::INVAL);
    }
    Ok(())
}

fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl MemFs {
    /// An empty file system whose root is owned by root with mode 0755.
    pub fn new() -> MemFs {
        MemFs::with_clock(Box::new(Timespec::now))
    }

    /// Like [`MemFs::new`], with timestamps taken from `clock`.
    pub fn with_clock(mut clock: Clock) -> MemFs {
        let now = clock();
        let root = Inode {
            kind: FileKind::Dir,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink: 2,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            xattrs: BTreeMap::new(),
            lookups: 0,
            opens: 0,
            content: Content::Dir(Dir::new(ROOT_INO)),
        };
        let mut inodes = HashMap::new();
        inodes.insert(ROOT_INO, root);
        MemFs {
            inodes,
            next_ino: ROOT_INO + 1,
            clock,
        }
    }

    /// Number of inodes alive, including unlinked ones still referenced.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Check the model against itself: link counts match the entries that
    /// name each inode, ".." pointers match, the tree has no cycles, cookie
    /// maps agree, files hold no pages past their end, and nothing
    /// unreferenced lingers. Randomized tests call this after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut names: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        for (&ino, n) in &self.inodes {
            let Some(d) = n.dir() else { continue };
            if d.by_name.len() != d.by_cookie.len() {
                return Err(format!("dir {ino}: name and cookie maps differ in size"));
            }
            for (name, &(child, cookie)) in &d.by_name {
                if d.by_cookie.get(&cookie) != Some(name)
                    || cookie <= DOTDOT_COOKIE
                    || cookie >= d.next_cookie
                {
                    return Err(format!("dir {ino}: bad cookie {cookie} for {name:?}"));
                }
                let c = self
                    .inodes
                    .get(&child)
                    .ok_or_else(|| format!("dir {ino}: {name:?} names missing inode {child}"))?;
                *names.entry(child).or_default() += 1;
                if let Some(cd) = c.dir() {
                    *subdirs.entry(ino).or_default() += 1;
                    if cd.parent != ino {
                        return Err(format!(
                            "dir {child}: '..' is {} but it sits in {ino}",
                            cd.parent
                        ));
                    }
                }
            }
        }
        for (&ino, n) in &self.inodes {
            let named = names.get(&ino).copied().unwrap_or(0);
            let expected = match &n.content {
                Content::Dir(d) => {
                    if named > 1 {
                        return Err(format!("dir {ino} has {named} names"));
                    }
                    // Every live directory leads up to the root.
                    if named == 1 || ino == ROOT_INO {
                        let mut up = d.parent;
                        let mut steps = 0;
                        while up != ROOT_INO {
                            up = self
                                .inodes
                                .get(&up)
                                .and_then(Inode::dir)
                                .ok_or(format!("dir {ino}: broken parent chain"))?
                                .parent;
                            steps += 1;
                            if steps > self.inodes.len() {
                                return Err(format!("dir {ino}: cycle above it"));
                            }
                        }
                        2 + subdirs.get(&ino).copied().unwrap_or(0)
                    } else {
                        0
                    }
                }
                Content::File { size, pages } => {
                    if let Some((&last, _)) = pages.last_key_value() {
                        if last >= size.div_ceil(PAGE) {
                            return Err(format!("file {ino}: page {last} past size {size}"));
                        }
                    }
                    named
                }
                _ => named,
            };
            if n.nlink != expected {
                return Err(format!(
                    "inode {ino}: nlink {} but {expected} expected",
                    n.nlink
                ));
            }
            if ino != ROOT_INO && n.nlink == 0 && n.lookups == 0 && n.opens == 0 {
                return Err(format!("inode {ino} is unreferenced but still allocated"));
            }
        }
        Ok(())
    }

    fn now(&mut self) -> Timespec {
        (self.clock)()
    }

    fn node(&self, ino: Ino) -> VfsResult<&Inode> {
        self.inodes.get(&ino).ok_or(Errno::NOENT)
    }

    fn node_mut(&mut self, ino: Ino) -> VfsResult<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(Errno::NOENT)
    }

    /// The directory `ino`; ENOTDIR if it is something else, ENOENT if it
    /// was removed (a removed directory accepts no new entries).
    fn live_dir(&self, ino: Ino) -> VfsResult<&Dir> {
        let node = self.node(ino)?;
        let dir = node.dir().ok_or(Errno::NOTDIR)?;
        if node.nlink == 0 {
            return Err(Errno::NOENT);
        }
        Ok(dir)
    }

    fn dir_mut(&mut self, ino: Ino) -> &mut Dir {
        self.inodes
            .get_mut(&ino)
            .and_then(Inode::dir_mut)
            .expect("checked to be a directory")
    }

    fn attr_of(&self, ino: Ino) -> VfsResult<Attr> {
        let n = self.node(ino)?;
        let (size, blocks, rdev) = match &n.content {
            Content::File { size, pages } => (*size, pages.len() as u64 * (PAGE / 512), 0),
            Content::Dir(_) => (PAGE, PAGE / 512, 0),
            Content::Symlink(t) => (t.len() as u64, 0, 0),
            Content::Special { rdev } => (0, 0, *rdev),
        };
        Ok(Attr {
            ino,
            size,
            blocks,
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            crtime: n.crtime,
            kind: n.kind,
            perm: n.perm,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            rdev,
            blksize: PAGE as u32,
        })
    }

    /// Record a change of the directory's entries.
    fn touch_dir(&mut self, dir: Ino, now: Timespec) {
        let n = self.inodes.get_mut(&dir).expect("directory exists");
        n.mtime = now;
        n.ctime = now;
    }

    fn touch_ctime(&mut self, ino: Ino, now: Timespec) {
        self.inodes.get_mut(&ino).expect("inode exists").ctime = now;
    }

    /// Drop the inode once nothing names or references it.
    fn maybe_free(&mut self, ino: Ino) {
        if ino == ROOT_INO {
            return;
        }
        if let Some(n) = self.inodes.get(&ino) {
            if n.nlink == 0 && n.lookups == 0 && n.opens == 0 {
                self.inodes.remove(&ino);
            }
        }
    }

    /// Whether `ino` is `ancestor` or lies below it.
    fn is_in_subtree(&self, mut ino: Ino, ancestor: Ino) -> bool {
        loop {
            if ino == ancestor {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            match self.inodes.get(&ino).and_then(Inode::dir) {
                Some(d) => ino = d.parent,
                None => return false,
            }
        }
    }

    /// Create a new inode named `name` in `parent`. The caller has checked
    /// that the name is free.
    fn create_node(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        ctx: &Ctx,
        content: Content,
    ) -> VfsResult<Attr> {
        let now = self.now();
        let pnode = self.node(parent)?;
        let mut perm = (mode & !ctx.umask & 0o7777) as u16;
        // BSD/Linux group inheritance: a setgid directory hands its group
        // down, and its setgid bit to subdirectories.
        let gid = if pnode.perm & libc::S_ISGID as u16 != 0 {
            if kind == FileKind::Dir {
                perm |= libc::S_ISGID as u16;
            }
            pnode.gid
        } else {
            ctx.gid
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        let nlink = if kind == FileKind::Dir { 2 } else { 1 };
        let inode = Inode {
            kind,
            perm,
            uid: ctx.uid,
            gid,
            nlink,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            xattrs: BTreeMap::new(),
            lookups: 1,
            opens: 0,
            content,
        };
        self.inodes.insert(ino, inode);
        self.dir_mut(parent).insert(name, ino);
        if kind == FileKind::Dir {
            self.node_mut(parent)?.nlink += 1;
        }
        self.touch_dir(parent, now);
        self.attr_of(ino)
    }

    /// Checks shared by every call that adds `name` to `parent`.
    fn check_new_entry(&self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        if is_dot_or_dotdot(name) {
            return Err(Errno::EXIST);
        }
        check_name(name)?;
        let dir = self.live_dir(parent)?;
        if dir.get(name).is_some() {
            return Err(Errno::EXIST);
        }
        Ok(())
    }

    /// Remove the entry `name` from `parent` and drop the link it held.
    fn unlink_entry(&mut self, parent: Ino, name: &[u8], now: Timespec) {
        let ino = self.dir_mut(parent).remove(name).expect("entry exists");
        self.drop_link(parent, ino, now);
    }

    /// Drop one link of `ino`, whose entry in `parent` is gone or now names
    /// another inode. A removed directory loses both its links, and its
    /// parent loses the "..".
    fn drop_link(&mut self, parent: Ino, ino: Ino, now: Timespec) {
        let child = self.inodes.get_mut(&ino).expect("entry names a live inode");
        if child.kind == FileKind::Dir {
            child.nlink = 0;
            self.inodes.get_mut(&parent).expect("parent exists").nlink -= 1;
        } else {
            child.nlink -= 1;
        }
        self.touch_ctime(ino, now);
        self.maybe_free(ino);
    }

    /// If `ino` is a directory, make `parent` its "..", fixing link counts.
    fn reparent(&mut self, ino: Ino, parent: Ino) {
        let old_parent = match self.inodes.get_mut(&ino).and_then(Inode::dir_mut) {
            Some(d) => std::mem::replace(&mut d.parent, parent),
            None => return,
        };
        if old_parent != parent {
            self.inodes
                .get_mut(&old_parent)
                .expect("old parent exists")
                .nlink -= 1;
            self.inodes
                .get_mut(&parent)
                .expect("new parent exists")
                .nlink += 1;
        }
    }

    fn rename_exchange(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        src: Ino,
        dst: Ino,
    ) -> VfsResult<()> {
        if src == dst {
            return Ok(());
        }
        // Neither side may end up inside itself.
        let src_is_dir = self.node(src)?.kind == FileKind::Dir;
        let dst_is_dir = self.node(dst)?.kind == FileKind::Dir;
        if (src_is_dir && self.is_in_subtree(newparent, src))
            || (dst_is_dir && self.is_in_subtree(parent, dst))
        {
            return Err(Errno::INVAL);
        }
        let now = self.now();
        self.dir_mut(parent).replace(name, dst);
        self.dir_mut(newparent).replace(newname, src);
        // Reparent one at a time; the link counts of the two parents come out
        // right because each move is counted on its own.
        self.reparent(src, newparent);
        self.reparent(dst, parent);
        self.touch_ctime(src, now);
        self.touch_ctime(dst, now);
        self.touch_dir(parent, now);
        self.touch_dir(newparent, now);
        Ok(())
    }

    /// Bytes `[offset, offset + size)` of a file, zeros where no page is.
    fn read_file(size: u64, pages: &BTreeMap<u64, Box<[u8]>>, offset: u64, len: u32) -> Vec<u8> {
        if offset >= size {
            return Vec::new();
        }
        let end = size.min(offset.saturating_add(len as u64));
        let mut out = vec![0u8; (end - offset) as usize];
        for (&pno, page) in pages.range(offset / PAGE..=(end - 1) / PAGE) {
            let pstart = pno * PAGE;
            let from = offset.max(pstart);
            let to = end.min(pstart + PAGE);
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&page[(from - pstart) as usize..(to - pstart) as usize]);
        }
        out
    }

    fn write_pages(pages: &mut BTreeMap<u64, Box<[u8]>>, offset: u64, data: &[u8]) {
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let pno = pos / PAGE;
            let within = (pos % PAGE) as usize;
            let n = rest.len().min(PAGE as usize - within);
            let page = pages
                .entry(pno)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[within..within + n].copy_from_slice(&rest[..n]);
            pos += n as u64;
            rest = &rest[n..];
        }
    }

    /// Make bytes `[from, to)` read as zeros: whole pages go, the pages at
    /// the edges are zeroed in part.
    fn zero_pages(pages: &mut BTreeMap<u64, Box<[u8]>>, from: u64, to: u64) {
        // Within one page the whole-page range is empty (or reversed).
        let (lo, hi) = (from.div_ceil(PAGE), to / PAGE);
        let whole: Vec<u64> = if lo < hi {
            pages.range(lo..hi).map(|(&p, _)| p).collect()
        } else {
            Vec::new()
        };
        for p in whole {
            pages.remove(&p);
        }
        for pno in [from / PAGE, (to - 1) / PAGE] {
            if let Some(page) = pages.get_mut(&pno) {
                let start = pno * PAGE;
                let lo = from.max(start) - start;
                let hi = to.min(start + PAGE) - start;
                page[lo as usize..hi as usize].fill(0);
            }
        }
    }

    /// Cut or extend to `new_size`; bytes past the old end read as zeros.
    fn truncate_pages(size: &mut u64, pages: &mut BTreeMap<u64, Box<[u8]>>, new_size: u64) {
        if new_size < *size {
            // Drop whole pages past the end and zero the tail of the last
            // one, so that a later extension reads zeros there.
            pages.split_off(&new_size.div_ceil(PAGE));
            let tail = (new_size % PAGE) as usize;
            if let Some(page) = pages.get_mut(&(new_size / PAGE)) {
                // A page that starts exactly at the new end was dropped above.
                page[tail..].fill(0);
            }
        }
        *size = new_size;
    }
}

impl Vfs for MemFs {
    fn lookup(&mut self, parent: Ino, name: &[u8]) -> VfsResult<Attr> {
        let dir = self.live_dir(parent)?;
        let ino = match name {
            b"." => parent,
            b".." => dir.parent,
            _ => {
                check_name(name)?;
                dir.get(name).ok_or(Errno::NOENT)?
            }
        };
        self.node_mut(ino)?.lookups += 1;
        self.attr_of(ino)
    }

    fn forget(&mut self, ino: Ino, nlookup: u64) {
        if let Some(n) = self.inodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
            self.maybe_free(ino);
        }
    }

    fn getattr(&mut self, ino: Ino) -> VfsResult<Attr> {
        self.attr_of(ino)
    }

    fn setattr(&mut self, ino: Ino, set: &SetAttr) -> VfsResult<Attr> {
        let now = self.now();
        let n = self.node_mut(ino)?;
        // Validate everything before changing anything.
        if let Some(size) = set.size {
            match n.content {
                Content::File { .. } => {}
                Content::Dir(_) => return Err(Errno::ISDIR),
                _ => return Err(Errno::INVAL),
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::FBIG);
            }
        }
        if let Some(mode) = set.mode {
            n.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = set.uid {
            n.uid = uid;
        }
        if let Some(gid) = set.gid {
            n.gid = gid;
        }
        if let Some(new_size) = set.size {
            if let Content::File { size, pages } = &mut n.content {
                Self::truncate_pages(size, pages, new_size);
            }
            // Linux updates the times on every truncate, even to the same size.
            n.mtime = now;
        }
        match set.atime {
            Some(TimeSet::Now) => n.atime = now,
            Some(TimeSet::At(t)) => n.atime = t,
            None => {}
        }
        match set.mtime {
            Some(TimeSet::Now) => n.mtime = now,
            Some(TimeSet::At(t)) => n.mtime = t,
            None => {}
        }
        // Any attribute change is a status change.
        n.ctime = set.ctime.unwrap_or(now);
        self.attr_of(ino)
    }

    fn readlink(&mut self, ino: Ino) -> VfsResult<Vec<u8>> {
        match &self.node(ino)?.content {
            Content::Symlink(t) => Ok(t.clone()),
            _ => Err(Errno::INVAL),
        }
    }

    fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: &Ctx,
    ) -> VfsResult<Attr> {
        // No type bits means a regular file, as in mknod(2).
        let kind = if mode & libc::S_IFMT == 0 {
            FileKind::File
        } else {
            FileKind::from_mode(mode).ok_or(Errno::INVAL)?
        };
        let content = match kind {
            FileKind::File => Content::File {
                size: 0,
                pages: BTreeMap::new(),
            },
            FileKind::Dir | FileKind::Symlink => return Err(Errno::INVAL),
            FileKind::CharDev | FileKind::BlockDev => Content::Special { rdev },
            FileKind::Fifo | FileKind::Socket => Content::Special { rdev: 0 },
        };
        self.check_new_entry(parent, name)?;
        self.create_node(parent, name, kind, mode, ctx, content)
    }

    fn mkdir(&mut self, parent: Ino, name: &[u8], mode: u32, ctx: &Ctx) -> VfsResult<Attr> {
        self.check_new_entry(parent, name)?;
        self.create_node(
            parent,
            name,
            FileKind::Dir,
            mode,
            ctx,
            Content::Dir(Dir::new(parent)),
        )
    }

    fn unlink(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        if is_dot_or_dotdot(name) {
            return Err(Errno::ISDIR);
        }
        check_name(name)?;
        let ino = self.live_dir(parent)?.get(name).ok_or(Errno::NOENT)?;
        if self.node(ino)?.kind == FileKind::Dir {
            return Err(Errno::ISDIR);
        }
        let now = self.now();
        self.unlink_entry(parent, name, now);
        self.touch_dir(parent, now);
        Ok(())
    }

    fn rmdir(&mut self, parent: Ino, name: &[u8]) -> VfsResult<()> {
        match name {
            b"." => return Err(Errno::INVAL),
            b".." => return Err(Errno::NOTEMPTY),
            _ => check_name(name)?,
        }
        let ino = self.live_dir(parent)?.get(name).ok_or(Errno::NOENT)?;
        let dir = self.node(ino)?.dir().ok_or(Errno::NOTDIR)?;
        if !dir.by_name.is_empty() {
            return Err(Errno::NOTEMPTY);
        }
        let now = self.now();
        self.unlink_entry(parent, name, now);
        self.touch_dir(parent, now);
        Ok(())
    }

    fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], ctx: &Ctx) -> VfsResult<Attr> {
        if target.is_empty() {
            return Err(Errno::NOENT);
        }
        if target.len() > SYMLINK_MAX_BYTES {
            return Err(Errno::NAMETOOLONG);
        }
        self.check_new_entry(parent, name)?;
        // Symlinks are 0777 regardless of the umask.
        let ctx = Ctx { umask: 0, ..*ctx };
        self.create_node(
            parent,
            name,
            FileKind::Symlink,
            0o777,
            &ctx,
            Content::Symlink(target.to_vec()),
        )
    }

    fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> VfsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::INVAL);
        }
        if is_dot_or_dotdot(name) || is_dot_or_dotdot(newname) {
            return Err(Errno::BUSY);
        }
        check_name(name)?;
        check_name(newname)?;
        let src = self.live_dir(parent)?.get(name).ok_or(Errno::NOENT)?;
        let dst = self.live_dir(newparent)?.get(newname);
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Errno::NOENT)?;
            return self.rename_exchange(parent, name, newparent, newname, src, dst);
        }
        if dst.is_some() && flags & RENAME_NOREPLACE != 0 {
            return Err(Errno::EXIST);
        }
        let src_is_dir = self.node(src)?.kind == FileKind::Dir;
        if src_is_dir && self.is_in_subtree(newparent, src) {
            return Err(Errno::INVAL);
        }
        if let Some(dst) = dst {
            let dst_is_dir = self.node(dst)?.kind == FileKind::Dir;
            // The target is an ancestor of the source, so not empty (Linux
            // reports this before looking at types).
            if dst_is_dir && self.is_in_subtree(parent, dst) {
                return Err(Errno::NOTEMPTY);
            }
            // Two names of one inode: POSIX says do nothing.
            if dst == src {
                return Ok(());
            }
            match (src_is_dir, self.node(dst)?.dir()) {
                (true, None) => return Err(Errno::NOTDIR),
                (false, Some(_)) => return Err(Errno::ISDIR),
                (true, Some(d)) if !d.by_name.is_empty() => return Err(Errno::NOTEMPTY),
                _ => {}
            }
        }
        let now = self.now();
        self.dir_mut(parent).remove(name);
        match dst {
            // The name stays, so it keeps its cookie: a reader that is past
            // it must not see it again, one that is before it must see it.
            Some(dst) => {
                self.dir_mut(newparent).replace(newname, src);
                self.drop_link(newparent, dst, now);
            }
            None => self.dir_mut(newparent).insert(newname, src),
        }
        self.reparent(src, newparent);
        self.touch_ctime(src, now);
        self.touch_dir(parent, now);
        self.touch_dir(newparent, now);
        Ok(())
    }

    fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> VfsResult<Attr> {
        let node = self.node(ino)?;
        if node.kind == FileKind::Dir {
            return Err(Errno::PERM);
        }
        // An unlinked inode cannot come back (linkat of an O_TMPFILE aside).
        if node.nlink == 0 {
            return Err(Errno::NOENT);
        }
        if node.nlink >= MAX_LINKS {
            return Err(Errno::MLINK);
        }
        self.check_new_entry(newparent, newname)?;
        let now = self.now();
        self.dir_mut(newparent).insert(newname, ino);
        let n = self.node_mut(ino)?;
        n.nlink += 1;
        n.lookups += 1;
        n.ctime = now;
        self.touch_dir(newparent, now);
        self.attr_of(ino)
    }

    fn open(&mut self, ino: Ino, _flags: i32) -> VfsResult<()> {
        self.node_mut(ino)?.opens += 1;
        Ok(())
    }

    fn release(&mut self, ino: Ino) {
        if let Some(n) = self.inodes.get_mut(&ino) {
            n.opens = n.opens.saturating_sub(1);
            self.maybe_free(ino);
        }
    }

    fn read(&mut self, ino: Ino, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        match &self.node(ino)?.content {
            Content::File { size: fsize, pages } => {
                Ok(Self::read_file(*fsize, pages, offset, size))
            }
            Content::Dir(_) => Err(Errno::ISDIR),
            _ => Err(Errno::INVAL),
        }
    }

    fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> VfsResult<u32> {
        let now = self.now();
        let n = self.node_mut(ino)?;
        let Content::File { size, pages } = &mut n.content else {
            return Err(if n.kind == FileKind::Dir {
                Errno::ISDIR
            } else {
                Errno::INVAL
            });
        };
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::FBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::FBIG);
        }
        Self::write_pages(pages, offset, data);
        *size = (*size).max(end);
        n.mtime = now;
        n.ctime = now;
        Ok(data.len() as u32)
    }

    fn fsync(&mut self, ino: Ino, _datasync: bool) -> VfsResult<()> {
        self.node(ino).map(|_| ())
    }

    fn readdir(&mut self, ino: Ino, offset: u64, max_entries: usize) -> VfsResult<Vec<DirEntry>> {
        let dir = self.live_dir(ino)?;
        let mut out = Vec::new();
        let dots = [
            (DOT_COOKIE, ino, &b"."[..]),
            (DOTDOT_COOKIE, dir.parent, &b".."[..]),
        ];
        for (cookie, dino, name) in dots {
            if offset < cookie && out.len() < max_entries {
                out.push(DirEntry {
                    ino: dino,
                    offset: cookie,
                    kind: FileKind::Dir,
                    name: name.to_vec(),
                });
            }
        }
        let start = offset.max(DOTDOT_COOKIE) + 1;
        for (&cookie, name) in dir.by_cookie.range(start..) {
            if out.len() >= max_entries {
                break;
            }
            let (child, _) = dir.by_name[name];
            let kind = self.node(child)?.kind;
            out.push(DirEntry {
                ino: child,
                offset: cookie,
                kind,
                name: name.clone(),
            });
        }
        Ok(out)
    }

    fn statfs(&mut self) -> VfsResult<StatFs> {
        let used: u64 = self
            .inodes
            .values()
            .map(|n| match &n.content {
                Content::File { pages, .. } => pages.len() as u64,
                Content::Dir(_) => 1,
                _ => 0,
            })
            .sum();
        let free = TOTAL_BLOCKS.saturating_sub(used);
        Ok(StatFs {
            blocks: TOTAL_BLOCKS,
            bfree: free,
            bavail: free,
            files: TOTAL_INODES,
            ffree: TOTAL_INODES.saturating_sub(self.inodes.len() as u64),
            bsize: PAGE as u32,
            namelen: NAME_MAX_BYTES as u32,
            frsize: PAGE as u32,
        })
    }

    fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> VfsResult<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Errno::RANGE);
        }
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(Errno::INVAL);
        }
        let now = self.now();
        let n = self.node_mut(ino)?;
        let exists = n.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(Errno::EXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(Errno::NODATA);
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.ctime = now;
        Ok(())
    }

    fn getxattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<Vec<u8>> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Errno::RANGE);
        }
        self.node(ino)?
            .xattrs
            .get(name)
            .cloned()
            .ok_or(Errno::NODATA)
    }

    fn listxattr(&mut self, ino: Ino) -> VfsResult<Vec<Vec<u8>>> {
        Ok(self.node(ino)?.xattrs.keys().cloned().collect())
    }

    fn removexattr(&mut self, ino: Ino, name: &[u8]) -> VfsResult<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(Errno::RANGE);
        }
        let now = self.now();
        let n = self.node_mut(ino)?;
        n.xattrs.remove(name).ok_or(Errno::NODATA)?;
        n.ctime = now;
        Ok(())
    }

    fn fallocate(&mut self, ino: Ino, offset: u64, length: u64, mode: i32) -> VfsResult<()> {
        let how = FallocMode::parse(mode, length)?;
        let now = self.now();
        let n = self.node_mut(ino)?;
        let Content::File { size, pages } = &mut n.content else {
            return Err(if n.kind == FileKind::Dir {
                Errno::ISDIR
            } else {
                Errno(libc::ENODEV)
            });
        };
        let end = offset.checked_add(length).ok_or(Errno::FBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::FBIG);
        }
        if how.zeroes() {
            Self::zero_pages(pages, offset, end);
        }
        // Space is not reserved (nothing is ever short of it here). Linux
        // changes the times when the size grows, and on every punch or zero.
        let grows = how.grows() && end > *size;
        if grows {
            *size = end;
        }
        if grows || how.zeroes() {
            n.mtime = now;
            n.ctime = now;
        }
        Ok(())
    }

    fn sync(&mut self) -> VfsResult<()> {
        Ok(())
    }

    fn read_only(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE};

    const CTX: Ctx = Ctx {
        uid: 1000,
        gid: 1000,
        pid: 1,
        umask: 0o022,
    };

    /// A clock that ticks one second per call, so every change is visible.
    fn fs() -> MemFs {
        let mut t = 0i64;
        MemFs::with_clock(Box::new(move || {
            t += 1;
            Timespec { sec: t, nsec: 0 }
        }))
    }

    fn file(fs: &mut MemFs, parent: Ino, name: &str) -> Ino {
        fs.mknod(parent, name.as_bytes(), libc::S_IFREG | 0o644, 0, &CTX)
            .unwrap()
            .ino
    }

    fn dir(fs: &mut MemFs, parent: Ino, name: &str) -> Ino {
        fs.mkdir(parent, name.as_bytes(), 0o755, &CTX).unwrap().ino
    }

    fn names(fs: &mut MemFs, ino: Ino) -> Vec<String> {
        let ents = fs.readdir(ino, 0, usize::MAX).unwrap();
        ents.into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect()
    }

    fn nlink(fs: &mut MemFs, ino: Ino) -> u32 {
        fs.getattr(ino).unwrap().nlink
    }

    #[test]
    fn create_applies_umask_and_owner() {
        let mut fs = fs();
        let a = fs
            .mknod(ROOT_INO, b"f", libc::S_IFREG | 0o666, 0, &CTX)
            .unwrap();
        assert_eq!(
            (a.kind, a.perm, a.uid, a.gid, a.nlink, a.size),
            (FileKind::File, 0o644, 1000, 1000, 1, 0)
        );
        assert_eq!(
            fs.mknod(ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, &CTX),
            Err(Errno::EXIST)
        );
        let s = fs.symlink(ROOT_INO, b"s", b"f", &CTX).unwrap();
        assert_eq!((s.perm, s.size), (0o777, 1));
        assert_eq!(fs.readlink(s.ino).unwrap(), b"f");
        assert_eq!(fs.readlink(a.ino), Err(Errno::INVAL));
    }

    #[test]
    fn setgid_directory_hands_down_group() {
        let mut fs = fs();
        let d = dir(&mut fs, ROOT_INO, "d");
        fs.setattr(
            d,
            &SetAttr {
                mode: Some(0o2775),
                gid: Some(50),
                ..Default::default()
            },
        )
        .unwrap();
        let f = fs.mknod(d, b"f", libc::S_IFREG | 0o644, 0, &CTX).unwrap();
        assert_eq!(f.gid, 50);
        let sub = fs.mkdir(d, b"sub", 0o755, &CTX).unwrap();
        assert_eq!((sub.gid, sub.perm), (50, 0o2755));
    }

    #[test]
    fn names_are_checked() {
        let mut fs = fs();
        let long = vec![b'x'; NAME_MAX_BYTES + 1];
        let max = vec![b'x'; NAME_MAX_BYTES];
        assert_eq!(
            fs.mknod(ROOT_INO, &long, libc::S_IFREG, 0, &CTX),
            Err(Errno::NAMETOOLONG)
        );
        assert_eq!(fs.lookup(ROOT_INO, &long), Err(Errno::NAMETOOLONG));
        assert_eq!(
            fs.mkdir(ROOT_INO, &long, 0o755, &CTX),
            Err(Errno::NAMETOOLONG)
        );
        fs.mknod(ROOT_INO, &max, libc::S_IFREG, 0, &CTX).unwrap();
        assert_eq!(
            fs.rename(ROOT_INO, &max, ROOT_INO, &long, 0),
            Err(Errno::NAMETOOLONG)
        );
        assert_eq!(
            fs.mknod(ROOT_INO, b"a/b", libc::S_IFREG, 0, &CTX),
            Err(Errno::INVAL)
        );
        let long_target = vec![b't'; SYMLINK_MAX_BYTES + 1];
        assert_eq!(
            fs.symlink(ROOT_INO, b"s", &long_target, &CTX),
            Err(Errno::NAMETOOLONG)
        );
        assert_eq!(fs.lookup(ROOT_INO, b"missing"), Err(Errno::NOENT));
    }

    #[test]
    fn sparse_writes_read_zeros_and_truncate_clears_tail() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        assert_eq!(fs.write(f, 10_000, b"hello").unwrap(), 5);
        let a = fs.getattr(f).unwrap();
        assert_eq!(a.size, 10_005);
        assert_eq!(a.blocks, 8, "only the written page is allocated");
        let data = fs.read(f, 0, 20_000).unwrap();
        assert_eq!(data.len(), 10_005);
        assert!(data[..10_000].iter().all(|&b| b == 0));
        assert_eq!(&data[10_000..], b"hello");
        // Shrink into the written bytes, grow again: the cut part reads zero.
        fs.setattr(
            f,
            &SetAttr {
                size: Some(10_002),
                ..Default::default()
            },
        )
        .unwrap();
        fs.setattr(
            f,
            &SetAttr {
                size: Some(10_005),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(fs.read(f, 10_000, 10).unwrap(), b"he\0\0\0");
        assert_eq!(fs.read(f, 20_000, 10).unwrap(), b"");
        // A write across a page boundary.
        let data: Vec<u8> = (0..9000u32).map(|i| i as u8).collect();
        fs.write(f, 4000, &data).unwrap();
        assert_eq!(fs.read(f, 4000, 9000).unwrap(), data);
        assert_eq!(fs.write(f, MAX_FILE_SIZE, b"x"), Err(Errno::FBIG));
        let d = dir(&mut fs, ROOT_INO, "d");
        assert_eq!(fs.read(d, 0, 1), Err(Errno::ISDIR));
        assert_eq!(
            fs.setattr(
                d,
                &SetAttr {
                    size: Some(0),
                    ..Default::default()
                }
            ),
            Err(Errno::ISDIR)
        );
    }

    #[test]
    fn write_and_truncate_update_times() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        let a0 = fs.getattr(f).unwrap();
        fs.write(f, 0, b"x").unwrap();
        let a1 = fs.getattr(f).unwrap();
        assert!(a1.mtime > a0.mtime && a1.ctime > a0.ctime && a1.atime == a0.atime);
        // Truncate to the same size still changes mtime and ctime (Linux).
        let a2 = fs
            .setattr(
                f,
                &SetAttr {
                    size: Some(1),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(a2.mtime > a1.mtime && a2.ctime > a1.ctime);
        // chmod changes only ctime; explicit times are kept as given.
        let a3 = fs
            .setattr(
                f,
                &SetAttr {
                    mode: Some(0o600),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!((a3.perm, a3.mtime), (0o600, a2.mtime));
        assert!(a3.ctime > a2.ctime);
        let t = Timespec { sec: 5, nsec: 7 };
        let a4 = fs
            .setattr(
                f,
                &SetAttr {
                    atime: Some(TimeSet::At(t)),
                    mtime: Some(TimeSet::At(t)),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!((a4.atime, a4.mtime), (t, t));
        assert!(a4.ctime > a3.ctime);
    }

    #[test]
    fn directory_link_counts() {
        let mut fs = fs();
        assert_eq!(nlink(&mut fs, ROOT_INO), 2);
        let a = dir(&mut fs, ROOT_INO, "a");
        let b = dir(&mut fs, ROOT_INO, "b");
        let c = dir(&mut fs, a, "c");
        file(&mut fs, a, "f");
        assert_eq!(
            (
                nlink(&mut fs, ROOT_INO),
                nlink(&mut fs, a),
                nlink(&mut fs, c)
            ),
            (4, 3, 2)
        );
        fs.rename(a, b"c", b, b"c", 0).unwrap();
        assert_eq!((nlink(&mut fs, a), nlink(&mut fs, b)), (2, 3));
        assert_eq!(fs.lookup(c, b"..").unwrap().ino, b);
        assert_eq!(fs.rmdir(ROOT_INO, b"b"), Err(Errno::NOTEMPTY));
        assert_eq!(fs.rmdir(a, b"f"), Err(Errno::NOTDIR));
        assert_eq!(fs.unlink(b, b"c"), Err(Errno::ISDIR));
        fs.rmdir(b, b"c").unwrap();
        assert_eq!(nlink(&mut fs, b), 2);
        // c is still referenced by the lookups above: it lingers, emptied.
        assert_eq!(nlink(&mut fs, c), 0);
        assert_eq!(fs.mknod(c, b"x", libc::S_IFREG, 0, &CTX), Err(Errno::NOENT));
        fs.forget(c, 2);
        assert_eq!(fs.getattr(c), Err(Errno::NOENT));
    }

    #[test]
    fn hard_links() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        let d = dir(&mut fs, ROOT_INO, "d");
        let before = fs.getattr(f).unwrap().ctime;
        let a = fs.link(f, d, b"g").unwrap();
        assert_eq!((a.ino, a.nlink), (f, 2));
        assert!(a.ctime > before);
        assert_eq!(fs.link(f, d, b"g"), Err(Errno::EXIST));
        assert_eq!(fs.link(d, ROOT_INO, b"d2"), Err(Errno::PERM));
        fs.write(f, 0, b"shared").unwrap();
        let g = fs.lookup(d, b"g").unwrap().ino;
        assert_eq!(fs.read(g, 0, 100).unwrap(), b"shared");
        // Renaming one link onto another name of the same inode does nothing.
        fs.rename(ROOT_INO, b"f", d, b"g", 0).unwrap();
        assert_eq!(names(&mut fs, ROOT_INO), [".", "..", "f", "d"]);
        assert_eq!(nlink(&mut fs, f), 2);
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_eq!(nlink(&mut fs, f), 1);
        assert_eq!(fs.read(g, 0, 100).unwrap(), b"shared");
    }

    #[test]
    fn unlinked_file_lives_until_forget_and_release() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        fs.write(f, 0, b"data").unwrap();
        fs.open(f, libc::O_RDONLY).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_eq!(fs.lookup(ROOT_INO, b"f"), Err(Errno::NOENT));
        assert_eq!(fs.getattr(f).unwrap().nlink, 0);
        fs.forget(f, 1);
        assert_eq!(fs.read(f, 0, 10).unwrap(), b"data", "still open");
        fs.release(f);
        assert_eq!(fs.read(f, 0, 10), Err(Errno::NOENT));
        assert_eq!(fs.inode_count(), 1);
    }

    #[test]
    fn rename_type_and_subtree_errors() {
        let mut fs = fs();
        let a = dir(&mut fs, ROOT_INO, "a");
        let b = dir(&mut fs, a, "b");
        dir(&mut fs, ROOT_INO, "empty");
        file(&mut fs, ROOT_INO, "f");
        file(&mut fs, b, "inner");
        assert_eq!(
            fs.rename(ROOT_INO, b"a", b, b"x", 0),
            Err(Errno::INVAL),
            "into own subtree"
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"a", a, b"x", 0),
            Err(Errno::INVAL),
            "into itself"
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"a", ROOT_INO, b"f", 0),
            Err(Errno::NOTDIR)
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"a", 0),
            Err(Errno::ISDIR)
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"empty", a, b"b", 0),
            Err(Errno::NOTEMPTY)
        );
        assert_eq!(
            fs.rename(b, b"inner", ROOT_INO, b"a", 0),
            Err(Errno::NOTEMPTY),
            "target is an ancestor"
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"nope", ROOT_INO, b"x", 0),
            Err(Errno::NOENT)
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"empty", RENAME_NOREPLACE),
            Err(Errno::EXIST)
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"new", RENAME_EXCHANGE),
            Err(Errno::NOENT)
        );
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"f", RENAME_NOREPLACE),
            Err(Errno::EXIST)
        );
        assert_eq!(fs.rename(ROOT_INO, b"f", ROOT_INO, b"f", 0), Ok(()));
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, b"x", 4),
            Err(Errno::INVAL)
        );
    }

    #[test]
    fn rename_replaces_and_frees_target() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        let g = file(&mut fs, ROOT_INO, "g");
        fs.forget(g, 1);
        fs.write(f, 0, b"F").unwrap();
        let before = fs.getattr(ROOT_INO).unwrap();
        fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", 0).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().ino, f);
        assert_eq!(
            fs.getattr(g),
            Err(Errno::NOENT),
            "replaced and unreferenced"
        );
        let after = fs.getattr(ROOT_INO).unwrap();
        assert!(after.mtime > before.mtime && after.ctime > before.ctime);
        assert!(
            fs.getattr(f).unwrap().ctime > before.ctime,
            "rename changes the inode's ctime"
        );
        // A directory over an empty directory, in another parent.
        let a = dir(&mut fs, ROOT_INO, "a");
        let b = dir(&mut fs, ROOT_INO, "b");
        let sub = dir(&mut fs, a, "sub");
        let victim = dir(&mut fs, b, "victim");
        fs.rename(a, b"sub", b, b"victim", 0).unwrap();
        assert_eq!(
            (nlink(&mut fs, a), nlink(&mut fs, b), nlink(&mut fs, victim)),
            (2, 3, 0)
        );
        assert_eq!(fs.lookup(sub, b"..").unwrap().ino, b);
    }

    #[test]
    fn rename_exchange_swaps_and_fixes_links() {
        let mut fs = fs();
        let a = dir(&mut fs, ROOT_INO, "a");
        let b = dir(&mut fs, ROOT_INO, "b");
        let d = dir(&mut fs, a, "d");
        let f = file(&mut fs, b, "f");
        fs.rename(a, b"d", b, b"f", RENAME_EXCHANGE).unwrap();
        assert_eq!(fs.lookup(a, b"d").unwrap().ino, f);
        assert_eq!(fs.lookup(b, b"f").unwrap().ino, d);
        assert_eq!(fs.lookup(d, b"..").unwrap().ino, b);
        assert_eq!((nlink(&mut fs, a), nlink(&mut fs, b)), (2, 3));
        // A directory cannot be exchanged with something inside it.
        let inner = dir(&mut fs, d, "inner");
        assert_eq!(
            fs.rename(b, b"f", d, b"inner", RENAME_EXCHANGE),
            Err(Errno::INVAL)
        );
        assert_eq!(
            fs.rename(d, b"inner", b, b"f", RENAME_EXCHANGE),
            Err(Errno::INVAL)
        );
        assert_eq!(nlink(&mut fs, inner), 2);
    }

    #[test]
    fn readdir_cookies_survive_changes() {
        let mut fs = fs();
        for i in 0..10 {
            file(&mut fs, ROOT_INO, &format!("f{i}"));
        }
        let first = fs.readdir(ROOT_INO, 0, 5).unwrap();
        assert_eq!(
            first.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            (first[0].name.as_slice(), first[1].name.as_slice()),
            (&b"."[..], &b".."[..])
        );
        assert_eq!(first[1].ino, ROOT_INO);
        // Delete one already read and one ahead, add one: the rest appear
        // exactly once, and the new one is included (it sorts after).
        fs.unlink(ROOT_INO, b"f0").unwrap();
        fs.unlink(ROOT_INO, b"f5").unwrap();
        file(&mut fs, ROOT_INO, "new");
        let rest = fs
            .readdir(ROOT_INO, first.last().unwrap().offset, usize::MAX)
            .unwrap();
        let rest: Vec<_> = rest
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect();
        assert_eq!(rest, ["f3", "f4", "f6", "f7", "f8", "f9", "new"]);
        // A cookie whose entry was deleted still works.
        let after_deleted = fs.readdir(ROOT_INO, 8, usize::MAX).unwrap();
        assert_eq!(after_deleted[0].name, b"f6");
        // Resuming after "." yields "..".
        assert_eq!(fs.readdir(ROOT_INO, 1, 1).unwrap()[0].name, b"..");
        let f = fs.lookup(ROOT_INO, b"f3").unwrap().ino;
        assert_eq!(fs.readdir(f, 0, 10), Err(Errno::NOTDIR));
    }

    /// The default readdirplus: each entry but the dots comes with the
    /// attributes lookup gives and holds a lookup reference, which keeps an
    /// unlinked inode alive until it is forgotten.
    #[test]
    fn readdirplus_entries_count_as_lookups() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        fs.write(f, 0, b"data").unwrap();
        let d = dir(&mut fs, ROOT_INO, "d");
        // Drop the references creating them took.
        fs.forget(f, 1);
        fs.forget(d, 1);
        let plus = fs.readdirplus(ROOT_INO, 0, usize::MAX).unwrap();
        let got: Vec<_> = plus
            .iter()
            .map(|(e, a)| {
                (
                    String::from_utf8(e.name.clone()).unwrap(),
                    a.as_ref().map(|a| a.ino),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (".".to_string(), None),
                ("..".to_string(), None),
                ("f".to_string(), Some(f)),
                ("d".to_string(), Some(d))
            ]
        );
        assert_eq!(plus[2].1.as_ref().unwrap().size, 4);
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_eq!(fs.read(f, 0, 10).unwrap(), b"data", "held by readdirplus");
        fs.forget(f, 1);
        assert_eq!(fs.read(f, 0, 10), Err(Errno::NOENT));
        assert_eq!(fs.readdirplus(f, 0, 10), Err(Errno::NOENT));
    }

    #[test]
    fn xattrs() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        assert_eq!(fs.getxattr(f, b"user.a"), Err(Errno::NODATA));
        assert_eq!(
            fs.setxattr(f, b"user.a", b"1", XATTR_REPLACE),
            Err(Errno::NODATA)
        );
        fs.setxattr(f, b"user.a", b"1", XATTR_CREATE).unwrap();
        assert_eq!(
            fs.setxattr(f, b"user.a", b"2", XATTR_CREATE),
            Err(Errno::EXIST)
        );
        fs.setxattr(f, b"user.a", b"2", XATTR_REPLACE).unwrap();
        fs.setxattr(f, b"user.b", b"", 0).unwrap();
        assert_eq!(fs.getxattr(f, b"user.a").unwrap(), b"2");
        assert_eq!(fs.getxattr(f, b"user.b").unwrap(), b"");
        assert_eq!(
            fs.listxattr(f).unwrap(),
            [b"user.a".to_vec(), b"user.b".to_vec()]
        );
        let before = fs.getattr(f).unwrap().ctime;
        fs.removexattr(f, b"user.a").unwrap();
        assert!(fs.getattr(f).unwrap().ctime > before);
        assert_eq!(fs.removexattr(f, b"user.a"), Err(Errno::NODATA));
        assert_eq!(
            fs.setxattr(f, b"user.big", &vec![0; XATTR_SIZE_MAX + 1], 0),
            Err(Errno::E2BIG)
        );
    }

    #[test]
    fn mknod_special_files_and_fallocate() {
        let mut fs = fs();
        let p = fs
            .mknod(ROOT_INO, b"p", libc::S_IFIFO | 0o600, 0, &CTX)
            .unwrap();
        assert_eq!((p.kind, p.rdev), (FileKind::Fifo, 0));
        let c = fs
            .mknod(ROOT_INO, b"c", libc::S_IFCHR | 0o600, 0x0103, &CTX)
            .unwrap();
        assert_eq!((c.kind, c.rdev), (FileKind::CharDev, 0x0103));
        assert_eq!(
            fs.mknod(ROOT_INO, b"d", libc::S_IFDIR | 0o755, 0, &CTX),
            Err(Errno::INVAL)
        );
        let f = file(&mut fs, ROOT_INO, "f");
        fs.fallocate(f, 100, 1000, 0).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, 1100);
        fs.fallocate(f, 0, 10, 0).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, 1100, "never shrinks");
        assert_eq!(fs.read(f, 0, 2000).unwrap(), vec![0; 1100]);
        assert_eq!(
            fs.fallocate(f, 0, 10, FALLOC_FL_PUNCH_HOLE),
            Err(Errno::OPNOTSUPP)
        );
        fs.fallocate(f, 0, 5000, FALLOC_FL_KEEP_SIZE).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, 1100, "KEEP_SIZE");
        let st = fs.statfs().unwrap();
        assert!(st.bfree <= st.blocks && st.ffree < st.files && st.namelen == 255);
    }

    /// A punch zeroes its range and drops the whole pages in it; a zero
    /// range does the same and grows the file unless KEEP_SIZE.
    #[test]
    fn punch_and_zero_range() {
        let mut fs = fs();
        let f = file(&mut fs, ROOT_INO, "f");
        let data: Vec<u8> = (0..5 * PAGE).map(|i| (i % 251) as u8 + 1).collect();
        fs.write(f, 0, &data).unwrap();
        let punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
        // From inside page 0 to inside page 3: pages 1 and 2 go.
        fs.fallocate(f, 100, 3 * PAGE, punch).unwrap();
        let mut want = data.clone();
        want[100..(3 * PAGE + 100) as usize].fill(0);
        assert_eq!(fs.read(f, 0, 6 * PAGE as u32).unwrap(), want);
        assert_eq!(fs.getattr(f).unwrap().blocks, 3 * PAGE / 512);
        // Past the end: the size stays.
        fs.fallocate(f, 4 * PAGE, 10 * PAGE, punch).unwrap();
        want[4 * PAGE as usize..].fill(0);
        assert_eq!(fs.getattr(f).unwrap().size, 5 * PAGE);
        assert_eq!(fs.read(f, 0, 6 * PAGE as u32).unwrap(), want);
        fs.fallocate(f, 1, 2, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)
            .unwrap();
        want[1..3].fill(0);
        assert_eq!(fs.read(f, 0, 6 * PAGE as u32).unwrap(), want);
        fs.fallocate(f, 5 * PAGE - 1, 7, FALLOC_FL_ZERO_RANGE)
            .unwrap();
        want.resize(5 * PAGE as usize + 6, 0);
        assert_eq!(fs.read(f, 0, 6 * PAGE as u32).unwrap(), want);
    }

    /// Thousands of random operations (most fail, which is the point), with
    /// the invariants checked after each one.
    #[test]
    fn random_operations_keep_invariants() {
        let mut fs = fs();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let names: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        for step in 0..4_000 {
            let dirs: Vec<Ino> = fs
                .inodes
                .iter()
                .filter(|(_, n)| n.dir().is_some() && n.nlink > 0)
                .map(|(&i, _)| i)
                .collect();
            let all: Vec<Ino> = fs.inodes.keys().copied().collect();
            let mut dirs = dirs;
            dirs.sort();
            let mut all = all;
            all.sort();
            let d1 = dirs[rnd(dirs.len() as u64) as usize];
            let d2 = dirs[rnd(dirs.len() as u64) as usize];
            let n1 = names[rnd(5) as usize];
            let n2 = names[rnd(5) as usize];
            let ino = all[rnd(all.len() as u64) as usize];
            let op = rnd(14);
            let _ = match op {
                0 => fs.mknod(d1, n1, libc::S_IFREG | 0o644, 0, &CTX).map(drop),
                1 => fs.mkdir(d1, n1, 0o755, &CTX).map(drop),
                2 => fs.unlink(d1, n1),
                3 => fs.rmdir(d1, n1),
                4 => fs.rename(d1, n1, d2, n2, 0),
                5 => fs.rename(d1, n1, d2, n2, RENAME_NOREPLACE),
                6 => fs.rename(d1, n1, d2, n2, RENAME_EXCHANGE),
                7 => fs.link(ino, d1, n1).map(drop),
                8 => fs.symlink(d1, n1, b"t", &CTX).map(drop),
                9 => fs.write(ino, rnd(20_000), &[7u8; 5000]).map(drop),
                10 => fs
                    .setattr(
                        ino,
                        &SetAttr {
                            size: Some(rnd(20_000)),
                            ..Default::default()
                        },
                    )
                    .map(drop),
                11 => {
                    fs.forget(ino, 1);
                    Ok(())
                }
                12 => fs.open(ino, 0),
                _ => {
                    fs.release(ino);
                    Ok(())
                }
            };
            if let Err(e) = fs.check_invariants() {
                panic!("step {step}, op {op}: {e}");
            }
        }
    }
}
