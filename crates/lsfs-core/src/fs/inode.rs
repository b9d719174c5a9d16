//! The inode: 512 bytes in the IFILE. The last 384 bytes (the *area*) hold,
//! depending on the format (yFS's three):
//! - `INLINE_DATA`: a small file's bytes or a symlink's target;
//! - `INLINE_MAP`: a small sorted map, i.e. a short extent list (files) or a
//!   small directory;
//! - `BTREE`: nothing; the map is a B-tree rooted at `map_root`.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::fs::file::{BLOCK, MAX_FILE_BYTES};
use crate::meta::ifile::INODE_BYTES;
use lsfs_vfs::{Attr, FileKind, Timespec, SYMLINK_MAX_BYTES};

pub const AREA_BYTES: usize = 384;
const AREA_AT: usize = INODE_BYTES - AREA_BYTES;
/// Most data blocks an inode can map: one per block of the largest file.
pub const MAX_INODE_BLOCKS: u64 = MAX_FILE_BYTES / BLOCK;
/// Most links an inode on disk may count. `link` stops files at 65,000;
/// a directory counts one per subdirectory, and mkdir and rename add to it
/// unchecked, so a count near `u32::MAX` from damaged bytes would overflow.
/// 2^31 leaves 2^31 subdirectories of room (more than a 1 TiB IFILE holds).
pub const MAX_NLINK: u32 = 1 << 31;
/// Most entries a directory can hold: one per key below 2^62.
const MAX_DIR_ENTRIES: u64 = 1 << 62;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Format {
    InlineData = 0,
    InlineMap = 1,
    BTree = 2,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 4 KiB blocks mapped by this file (data only).
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub rdev: u32,
    pub format: Format,
    pub xattr_root: u64,
    pub map_root: u64,
    pub area: Vec<u8>,
}

impl Inode {
    pub fn new(ino: u64, mode: u32, uid: u32, gid: u32, now: Timespec) -> Inode {
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        Inode {
            ino,
            mode,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            uid,
            gid,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: 0,
            format: if kind == FileKind::Dir {
                Format::InlineMap
            } else {
                Format::InlineData
            },
            xattr_root: 0,
            map_root: 0,
            area: if kind == FileKind::Dir {
                0u16.to_le_bytes().to_vec()
            } else {
                Vec::new()
            },
        }
    }

    pub fn kind(&self) -> FileKind {
        FileKind::from_mode(self.mode).unwrap_or(FileKind::File)
    }

    pub fn attr(&self) -> Attr {
        Attr {
            ino: self.ino,
            size: self.size,
            // Saturating: `blocks` comes from the disk and may be anything.
            blocks: self
                .blocks
                .saturating_mul(8)
                .saturating_add((self.format == Format::InlineData && self.size > 0) as u64),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            kind: self.kind(),
            perm: (self.mode & 0o7777) as u16,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: 4096,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.area.len() <= AREA_BYTES,
            "inode {} area of {} bytes",
            self.ino,
            self.area.len()
        );
        let mut w = Writer::with_capacity(INODE_BYTES);
        w.u32(self.mode)
            .u32(self.nlink)
            .u32(self.uid)
            .u32(self.gid)
            .u64(self.size)
            .u64(self.blocks)
            .i64(self.atime.sec)
            .i64(self.mtime.sec)
            .i64(self.ctime.sec)
            .i64(self.crtime.sec)
            .u32(self.atime.nsec)
            .u32(self.mtime.nsec)
            .u32(self.ctime.nsec)
            .u32(self.crtime.nsec)
            .u32(self.rdev)
            .u8(self.format as u8)
            .bytes(&[0; 3])
            .u64(self.ino)
            .u64(self.xattr_root)
            .u64(self.map_root)
            .u16(self.area.len() as u16)
            .pad_to(AREA_AT)
            .bytes(&self.area)
            .pad_to(INODE_BYTES);
        w.finish()
    }

    pub fn decode(b: &[u8], ino: u64) -> Result<Inode> {
        let what = format!("inode {ino}");
        let mut r = Reader::new(b, &what);
        let mode = r.u32()?;
        let nlink = r.u32()?;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let size = r.u64()?;
        let blocks = r.u64()?;
        let (a, m, c, cr) = (r.i64()?, r.i64()?, r.i64()?, r.i64()?);
        let (an, mn, cn, crn) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let rdev = r.u32()?;
        let format = match r.u8()? {
            0 => Format::InlineData,
            1 => Format::InlineMap,
            2 => Format::BTree,
            f => return Err(Error::corrupt(format!("{what}: unknown map format {f}"))),
        };
        r.skip(3)?;
        let stored_ino = r.u64()?;
        if stored_ino != ino {
            return Err(Error::corrupt(format!(
                "{what}: slot holds inode {stored_ino}"
            )));
        }
        let xattr_root = r.u64()?;
        let map_root = r.u64()?;
        let area_len = r.u16()? as usize;
        Self::check_fields(&what, mode, format, size, area_len, blocks, nlink)?;
        let area = Reader::at(b, AREA_AT, &what).bytes(area_len)?.to_vec();
        let ts = |sec, nsec: u32| Timespec {
            sec,
            nsec: nsec.min(999_999_999),
        };
        Ok(Inode {
            ino,
            mode,
            nlink,
            uid,
            gid,
            size,
            blocks,
            atime: ts(a, an),
            mtime: ts(m, mn),
            ctime: ts(c, cn),
            crtime: ts(cr, crn),
            rdev,
            format,
            xattr_root,
            map_root,
            area,
        })
    }

    /// What the fields must agree on before the area is read: a known kind,
    /// an area that fits, and sizes every later operation can handle.
    #[allow(clippy::too_many_arguments)]
    fn check_fields(
        what: &str,
        mode: u32,
        format: Format,
        size: u64,
        area_len: usize,
        blocks: u64,
        nlink: u32,
    ) -> Result<()> {
        if area_len > AREA_BYTES || FileKind::from_mode(mode).is_none() {
            return Err(Error::corrupt(format!(
                "{what}: bad area length {area_len} or mode {mode:o}"
            )));
        }
        // Inline bytes live in the area, so an inline file is never longer
        // than the area (writes past it move the bytes to a block first) and
        // never shorter than its bytes. A size past the area would make the
        // next write grow the area beyond what `encode` can store.
        if format == Format::InlineData && (size > AREA_BYTES as u64 || area_len as u64 > size) {
            return Err(Error::corrupt(format!(
                "{what}: inline data of {area_len} bytes in a file of {size} bytes \
                 (inline files hold at most {AREA_BYTES})"
            )));
        }
        // Writes add to the count and truncation subtracts from it: a count
        // from damaged bytes near 2^64 overflowed the next write. No file
        // maps more blocks than the largest file has.
        if blocks > MAX_INODE_BLOCKS {
            return Err(Error::corrupt(format!(
                "{what}: counts {blocks} data blocks, more than the {MAX_INODE_BLOCKS} \
                 of the largest file"
            )));
        }
        // Writes and truncation never make a file longer than the largest
        // file; a directory's size counts its entries, one per key, and
        // keys are below 2^62 (`dir::name_hash`). Past these, arithmetic on
        // the size (a new entry adds 1) would overflow.
        let size_limit = if FileKind::from_mode(mode) == Some(FileKind::Dir) {
            MAX_DIR_ENTRIES
        } else {
            MAX_FILE_BYTES
        };
        if size > size_limit {
            return Err(Error::corrupt(format!(
                "{what}: size {size} is past the limit {size_limit} of a {:?}",
                FileKind::from_mode(mode).unwrap_or(FileKind::File)
            )));
        }
        if nlink > MAX_NLINK {
            return Err(Error::corrupt(format!(
                "{what}: counts {nlink} links, more than {MAX_NLINK}"
            )));
        }
        // Reading a link reads its whole size: bound it here.
        if FileKind::from_mode(mode) == Some(FileKind::Symlink) && size > SYMLINK_MAX_BYTES as u64 {
            return Err(Error::corrupt(format!(
                "{what}: symlink of {size} bytes, longer than {SYMLINK_MAX_BYTES}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `inode` fuzz target: a huge `blocks` count overflowed
    /// `attr()`'s conversion to 512-byte units.
    #[test]
    fn attr_of_huge_block_count_does_not_overflow() {
        let input: &[u8] = &[
            0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa4, 0x81, 0x00, 0x00, 0x01, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x47, 0x55,
            0x02, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x95, 0x55, 0x02, 0x6b, 0x00, 0x00, 0x00, 0x00,
            0x95, 0x55, 0x02, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x95, 0x55, 0x02, 0x6b, 0x00, 0x00,
            0x00, 0x00, 0x8d, 0xf6, 0xfe, 0x28, 0x8d, 0xf6, 0xfe, 0x28, 0x8d, 0xf6, 0xfe, 0x28,
            0x8d, 0xf6, 0xfe, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11,
        ];
        let ino = u64::from_le_bytes(input[..8].try_into().unwrap());
        let mut slot = input[8..].to_vec();
        slot.resize(INODE_BYTES, 0);
        // Such a count is now refused where decoded; `attr` still saturates.
        let e = Inode::decode(&slot, ino).unwrap_err().to_string();
        assert!(e.contains("counts 18446744073709551360 data blocks"), "{e}");
        slot[24..32].copy_from_slice(&0u64.to_le_bytes());
        let mut i = Inode::decode(&slot, ino).unwrap();
        i.blocks = 0xffff_ffff_ffff_ff00;
        assert_eq!(i.attr().blocks, u64::MAX);
    }

    /// Found by the `image` fuzz target (a resealed patch of 0xff bytes over
    /// an inode's size and block count; the read-only mount rolled an fsync
    /// record forward): the next data write added to a count near 2^64 and
    /// overflowed. The count is bounded where the inode is decoded.
    #[test]
    fn block_count_past_the_largest_file_is_corrupt() {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(30, libc::S_IFREG | 0o644, 0, 0, now);
        i.format = Format::InlineMap;
        i.area = 0u16.to_le_bytes().to_vec();
        i.blocks = MAX_INODE_BLOCKS;
        assert_eq!(Inode::decode(&i.encode(), 30).unwrap().blocks, 1 << 32);
        for blocks in [MAX_INODE_BLOCKS + 1, u64::MAX] {
            i.blocks = blocks;
            let e = Inode::decode(&i.encode(), 30).unwrap_err().to_string();
            assert!(
                e.contains(&format!("inode 30: counts {blocks} data blocks")),
                "{e}"
            );
        }
    }

    #[test]
    fn round_trip() {
        let mut i = Inode::new(
            77,
            libc::S_IFREG | 0o644,
            1,
            2,
            Timespec { sec: 5, nsec: 6 },
        );
        i.area = b"hello".to_vec();
        i.size = 5;
        assert_eq!(Inode::decode(&i.encode(), 77).unwrap(), i);
        assert!(
            Inode::decode(&i.encode(), 78).is_err(),
            "inode in the wrong slot accepted"
        );
    }

    /// Found by the `image` fuzz target (CI, 2026-11-24): a patch made an
    /// inline file's size 2595; writing 7 bytes at offset 4 then grew the
    /// area to the size and `encode` panicked at the next checkpoint.
    #[test]
    fn inline_size_past_the_area_is_corrupt() {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(57, libc::S_IFREG | 0o644, 0, 0, now);
        i.area = vec![7; 10];
        i.size = AREA_BYTES as u64;
        assert!(
            Inode::decode(&i.encode(), 57).is_ok(),
            "extended inline file refused"
        );
        i.size = 2595;
        let e = Inode::decode(&i.encode(), 57).unwrap_err().to_string();
        assert!(
            e.contains("inline data of 10 bytes in a file of 2595"),
            "{e}"
        );
        i.size = 9;
        let e = Inode::decode(&i.encode(), 57).unwrap_err().to_string();
        assert!(e.contains("inline data of 10 bytes in a file of 9"), "{e}");
    }

    /// A file longer than the largest file, or a directory with more
    /// entries than keys, is damage.
    #[test]
    fn size_past_the_limit_is_corrupt() {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut f = Inode::new(32, libc::S_IFREG | 0o644, 0, 0, now);
        f.format = Format::InlineMap;
        f.area = 0u16.to_le_bytes().to_vec();
        f.size = MAX_FILE_BYTES;
        assert!(Inode::decode(&f.encode(), 32).is_ok());
        f.size = MAX_FILE_BYTES + 1;
        let e = Inode::decode(&f.encode(), 32).unwrap_err().to_string();
        assert!(
            e.contains("inode 32: size 17592186044417 is past the limit"),
            "{e}"
        );
        let mut d = Inode::new(33, libc::S_IFDIR | 0o755, 0, 0, now);
        d.size = MAX_FILE_BYTES + 1;
        assert!(Inode::decode(&d.encode(), 33).is_ok());
        d.size = u64::MAX;
        let e = Inode::decode(&d.encode(), 33).unwrap_err().to_string();
        assert!(
            e.contains("past the limit 4611686018427387904 of a Dir"),
            "{e}"
        );
    }

    /// Link counts are added to by mkdir and rename: one near `u32::MAX`
    /// is damage, refused where decoded.
    #[test]
    fn link_count_past_the_limit_is_corrupt() {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(31, libc::S_IFDIR | 0o755, 0, 0, now);
        i.nlink = MAX_NLINK;
        assert_eq!(Inode::decode(&i.encode(), 31).unwrap().nlink, MAX_NLINK);
        for nlink in [MAX_NLINK + 1, u32::MAX] {
            i.nlink = nlink;
            let e = Inode::decode(&i.encode(), 31).unwrap_err().to_string();
            assert!(
                e.contains(&format!("inode 31: counts {nlink} links")),
                "{e}"
            );
        }
    }

    /// Found by the `image` fuzz target (a patch making an inode's mode a
    /// symlink's and its size 0xa_0008_0000, checksums resealed): reading
    /// the link allocated its whole size (40 GiB). The size is checked where
    /// the inode is decoded.
    #[test]
    fn symlink_longer_than_the_limit_is_corrupt() {
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(20, libc::S_IFLNK | 0o777, 0, 0, now);
        // A target longer than the area lives in a block.
        i.format = Format::InlineMap;
        i.area = 0u16.to_le_bytes().to_vec();
        i.size = SYMLINK_MAX_BYTES as u64;
        assert!(Inode::decode(&i.encode(), 20).is_ok());
        i.size = 0xa_0008_0000;
        let e = Inode::decode(&i.encode(), 20).unwrap_err().to_string();
        assert!(e.contains("symlink of"), "{e}");
    }
}
