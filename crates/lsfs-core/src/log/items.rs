//! Inline items: small typed values a log record carries in its summary
//! blocks, after the summary entries (docs/FORMAT.md §3.1). An fsync record
//! uses them for the namespace and metadata operations since the last
//! checkpoint, which recovery replays in order, and for the inode images
//! that set the exact attributes afterwards.
//!
//! Each item is `type u8, length u32, body`; the body's layout depends on
//! the type and must be consumed exactly. Decoding checks every length and
//! name, so a damaged item is refused with its index and type, never read
//! past its end.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::{INODE_BYTES, MAX_FILE_BYTES};
use lsfs_vfs::{FileKind, NAME_MAX_BYTES, SYMLINK_MAX_BYTES};

/// The fixed part of an inode image (docs/FORMAT.md §7): an image item
/// holds at least this and at most the whole 512 bytes.
pub const INODE_HEAD_BYTES: usize = 128;
/// Longest xattr name and value an item may hold (the engine's limits).
const XATTR_NAME_MAX: usize = 255;
const XATTR_VALUE_MAX: usize = 65536;
/// Bytes of an item before its body: type and length.
const ITEM_HEAD_BYTES: usize = 5;

/// Rename flags an item may carry (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
const RENAME_FLAGS: u32 = lsfs_vfs::RENAME_NOREPLACE | lsfs_vfs::RENAME_EXCHANGE;

/// One inline item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The first `image.len()` bytes of inode `ino`'s 512-byte image (the
    /// rest reads as zero): its fixed fields and its area's bytes.
    Inode {
        ino: u64,
        image: Vec<u8>,
    },
    /// A new inode `ino` named `name` in directory `parent` (mknod, create,
    /// mkdir, symlink: the type is in `mode`); `target` is a symlink's.
    Create {
        parent: u64,
        ino: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        name: Vec<u8>,
        target: Vec<u8>,
    },
    /// A new name for inode `ino`.
    Link {
        ino: u64,
        parent: u64,
        name: Vec<u8>,
    },
    Unlink {
        parent: u64,
        name: Vec<u8>,
    },
    Rmdir {
        parent: u64,
        name: Vec<u8>,
    },
    Rename {
        parent: u64,
        name: Vec<u8>,
        newparent: u64,
        newname: Vec<u8>,
        flags: u32,
    },
    /// A regular file shrunk to `size` bytes.
    Truncate {
        ino: u64,
        size: u64,
    },
    SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    RemoveXattr {
        ino: u64,
        name: Vec<u8>,
    },
    /// Bytes `[offset, offset + length)` of regular file `ino` made to read
    /// as zeros by fallocate (PUNCH_HOLE or ZERO_RANGE): the whole blocks
    /// in the range unmapped and freed, the partial ones at its edges
    /// zeroed. The size is the inode image's.
    Punch {
        ino: u64,
        offset: u64,
        length: u64,
    },
    /// A data-stream record this fsync wrote its hot or cold data blocks
    /// to (in a segment of their temperature, not in the log): it starts
    /// at physical block `block` and has sequence number `seq` and
    /// `nblocks` blocks. Recovery reads and verifies it (CRC, sequence
    /// number) and replays its blocks with this record's; if it does not
    /// verify, this record does not either (one flush covered both).
    StreamRecord {
        block: u64,
        seq: u64,
        nblocks: u32,
    },
    /// A cleaning pass's victims, free from this record on (a move record,
    /// `FLAG_MOVES`: its `StreamRecord` items name the records holding the
    /// victims' copies). Recovery points the DAT entries of the copied
    /// blocks at their copies, frees the DAT entries in `freed` (dead
    /// blocks nothing needed), drops the checkpoints in `dropped` (given up
    /// or expired since the last checkpoint, so they no longer kept their
    /// blocks) and counts the victims free.
    Moved {
        /// Blocks the latest checkpoint sees were freed because the writes
        /// that killed them are durable: every plain checkpoint up to the
        /// latest must be given up (recovery's checkpoint does).
        give_up_base: bool,
        victims: Vec<u64>,
        dropped: Vec<u64>,
        freed: Vec<u64>,
    },
}

const T_INODE: u8 = 1;
const T_CREATE: u8 = 2;
const T_LINK: u8 = 3;
const T_UNLINK: u8 = 4;
const T_RMDIR: u8 = 5;
const T_RENAME: u8 = 6;
const T_TRUNCATE: u8 = 7;
const T_SETXATTR: u8 = 8;
const T_REMOVEXATTR: u8 = 9;
const T_STREAM_RECORD: u8 = 10;
const T_PUNCH: u8 = 11;
const T_MOVED: u8 = 12;

impl Item {
    fn type_code(&self) -> u8 {
        match self {
            Item::Inode { .. } => T_INODE,
            Item::Create { .. } => T_CREATE,
            Item::Link { .. } => T_LINK,
            Item::Unlink { .. } => T_UNLINK,
            Item::Rmdir { .. } => T_RMDIR,
            Item::Rename { .. } => T_RENAME,
            Item::Truncate { .. } => T_TRUNCATE,
            Item::SetXattr { .. } => T_SETXATTR,
            Item::RemoveXattr { .. } => T_REMOVEXATTR,
            Item::StreamRecord { .. } => T_STREAM_RECORD,
            Item::Punch { .. } => T_PUNCH,
            Item::Moved { .. } => T_MOVED,
        }
    }

    /// A short name for messages.
    pub fn type_name(&self) -> &'static str {
        type_name(self.type_code())
    }

    /// Whether the item is a namespace or metadata operation (replayed in
    /// order), as opposed to an inode image.
    pub fn is_operation(&self) -> bool {
        !matches!(
            self,
            Item::Inode { .. } | Item::StreamRecord { .. } | Item::Moved { .. }
        )
    }

    fn body(&self, w: &mut Writer) {
        match self {
            Item::Inode { ino, image } => {
                w.u64(*ino).u16(image.len() as u16).bytes(image);
            }
            Item::Create {
                parent,
                ino,
                mode,
                uid,
                gid,
                rdev,
                name,
                target,
            } => {
                // Grouped as `decode_create` reads them back.
                w.u64(*parent).u64(*ino).u32(*mode);
                w.u32(*uid).u32(*gid).u32(*rdev);
                name_field(w, name);
                w.u16(target.len() as u16).bytes(target);
            }
            Item::Link { ino, parent, name } => {
                w.u64(*ino).u64(*parent);
                name_field(w, name);
            }
            Item::Unlink { parent, name } | Item::Rmdir { parent, name } => {
                w.u64(*parent);
                name_field(w, name);
            }
            Item::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                w.u64(*parent).u64(*newparent).u32(*flags);
                name_field(w, name);
                name_field(w, newname);
            }
            Item::Truncate { ino, size } => {
                w.u64(*ino).u64(*size);
            }
            Item::SetXattr { ino, name, value } => {
                w.u64(*ino);
                name_field(w, name);
                w.u32(value.len() as u32).bytes(value);
            }
            Item::RemoveXattr { ino, name } => {
                w.u64(*ino);
                name_field(w, name);
            }
            Item::StreamRecord {
                block,
                seq,
                nblocks,
            } => {
                w.u64(*block).u64(*seq).u32(*nblocks);
            }
            Item::Punch {
                ino,
                offset,
                length,
            } => {
                w.u64(*ino).u64(*offset).u64(*length);
            }
            Item::Moved { .. } => self.moved_body(w),
        }
    }

    /// The body of an `Item::Moved`: its flag, then three lists.
    fn moved_body(&self, w: &mut Writer) {
        let Item::Moved {
            give_up_base,
            victims,
            dropped,
            freed,
        } = self
        else {
            unreachable!("moved_body of a {}", self.type_name())
        };
        w.u32(*give_up_base as u32);
        for list in [victims, dropped, freed] {
            w.u32(list.len() as u32);
            for &x in list {
                w.u64(x);
            }
        }
    }

    /// Bytes the item takes encoded, its type and length included.
    pub fn encoded_len(&self) -> usize {
        let mut w = Writer::default();
        self.body(&mut w);
        ITEM_HEAD_BYTES + w.buf.len()
    }

    /// Append the encoded item to `w`.
    pub fn encode(&self, w: &mut Writer) {
        let mut body = Writer::default();
        self.body(&mut body);
        w.u8(self.type_code())
            .u32(body.buf.len() as u32)
            .bytes(&body.buf);
    }
}

fn name_field(w: &mut Writer, name: &[u8]) {
    assert!(
        !name.is_empty() && name.len() <= 255,
        "name of {} bytes in an item",
        name.len()
    );
    w.u8(name.len() as u8).bytes(name);
}

fn type_name(t: u8) -> &'static str {
    match t {
        T_INODE => "inode image",
        T_CREATE => "create",
        T_LINK => "link",
        T_UNLINK => "unlink",
        T_RMDIR => "rmdir",
        T_RENAME => "rename",
        T_TRUNCATE => "truncate",
        T_SETXATTR => "setxattr",
        T_REMOVEXATTR => "removexattr",
        T_STREAM_RECORD => "stream record",
        T_PUNCH => "punch",
        T_MOVED => "moved",
        _ => "unknown",
    }
}

/// Encode `items` one after the other.
pub fn encode(items: &[Item]) -> Vec<u8> {
    let mut w = Writer::default();
    for it in items {
        it.encode(&mut w);
    }
    w.finish()
}

/// Decode the items of `bytes` (a record's inline bytes); `what` names the
/// record for messages.
pub fn decode(bytes: &[u8], what: &str) -> Result<Vec<Item>> {
    let mut out = Vec::new();
    let mut r = Reader::new(bytes, what);
    while r.pos() < bytes.len() {
        let i = out.len();
        let at = r.pos();
        let t = r.u8()?;
        let len = r.u32()? as usize;
        let body = r.bytes(len).map_err(|_| {
            Error::corrupt(format!(
                "{what}: item {i} ({}) at byte {at} claims {len} bytes, only {} follow",
                type_name(t),
                bytes.len() - at - ITEM_HEAD_BYTES
            ))
        })?;
        let ctx = format!("{what}: item {i} ({}) at byte {at}", type_name(t));
        let item = decode_body(t, body, &ctx)?;
        out.push(item);
    }
    Ok(out)
}

/// One item's fields, by type; the body must hold exactly them.
fn decode_body(t: u8, body: &[u8], ctx: &str) -> Result<Item> {
    let mut r = Reader::new(body, ctx);
    let item = match t {
        T_INODE => decode_inode(&mut r, ctx)?,
        T_CREATE => decode_create(&mut r, ctx)?,
        T_LINK => Item::Link {
            ino: r.u64()?,
            parent: r.u64()?,
            name: entry_name(&mut r, ctx)?,
        },
        T_UNLINK | T_RMDIR => {
            let parent = r.u64()?;
            let name = entry_name(&mut r, ctx)?;
            if t == T_UNLINK {
                Item::Unlink { parent, name }
            } else {
                Item::Rmdir { parent, name }
            }
        }
        T_RENAME => decode_rename(&mut r, ctx)?,
        T_TRUNCATE => {
            let (ino, size) = (r.u64()?, r.u64()?);
            // No file is longer: a truncation past it never happened.
            if size > MAX_FILE_BYTES {
                return Err(Error::corrupt(format!(
                    "{ctx}: truncation of inode {ino} to {size} bytes, past the largest file ({MAX_FILE_BYTES})"
                )));
            }
            Item::Truncate { ino, size }
        }
        T_SETXATTR => decode_setxattr(&mut r, ctx)?,
        T_REMOVEXATTR => Item::RemoveXattr {
            ino: r.u64()?,
            name: xattr_name(&mut r, ctx)?,
        },
        T_STREAM_RECORD => decode_stream_record(&mut r, ctx)?,
        T_PUNCH => decode_punch(&mut r, ctx)?,
        T_MOVED => Item::Moved {
            give_up_base: match r.u32()? {
                0 => false,
                1 => true,
                f => return Err(Error::corrupt(format!("{ctx}: flags {f:#x}"))),
            },
            victims: u64_list(&mut r, ctx)?,
            dropped: u64_list(&mut r, ctx)?,
            freed: u64_list(&mut r, ctx)?,
        },
        _ => return Err(Error::corrupt(format!("{ctx}: unknown item type {t}"))),
    };
    if r.pos() != body.len() {
        return Err(Error::corrupt(format!(
            "{ctx}: {} bytes left over after the item's fields",
            body.len() - r.pos()
        )));
    }
    Ok(item)
}

fn decode_inode(r: &mut Reader, ctx: &str) -> Result<Item> {
    let ino = r.u64()?;
    let n = r.u16()? as usize;
    if !(INODE_HEAD_BYTES..=INODE_BYTES).contains(&n) {
        return Err(Error::corrupt(format!(
            "{ctx}: inode image of {n} bytes (must be {INODE_HEAD_BYTES} to {INODE_BYTES})"
        )));
    }
    Ok(Item::Inode {
        ino,
        image: r.bytes(n)?.to_vec(),
    })
}

fn decode_create(r: &mut Reader, ctx: &str) -> Result<Item> {
    let (parent, ino, mode) = (r.u64()?, r.u64()?, r.u32()?);
    let (uid, gid, rdev) = (r.u32()?, r.u32()?, r.u32()?);
    let name = entry_name(r, ctx)?;
    let n = r.u16()? as usize;
    let target = r.bytes(n)?.to_vec();
    let kind = FileKind::from_mode(mode)
        .ok_or_else(|| Error::corrupt(format!("{ctx}: mode {mode:o} has no file type")))?;
    if (kind == FileKind::Symlink) == target.is_empty() || n > SYMLINK_MAX_BYTES {
        return Err(Error::corrupt(format!(
            "{ctx}: a {kind:?} with a target of {n} bytes (symlinks have 1 to {SYMLINK_MAX_BYTES}, others none)"
        )));
    }
    Ok(Item::Create {
        parent,
        ino,
        mode,
        uid,
        gid,
        rdev,
        name,
        target,
    })
}

fn decode_rename(r: &mut Reader, ctx: &str) -> Result<Item> {
    let (parent, newparent, flags) = (r.u64()?, r.u64()?, r.u32()?);
    if flags & !RENAME_FLAGS != 0 || flags == RENAME_FLAGS {
        return Err(Error::corrupt(format!("{ctx}: rename flags {flags:#x}")));
    }
    Ok(Item::Rename {
        parent,
        name: entry_name(r, ctx)?,
        newparent,
        newname: entry_name(r, ctx)?,
        flags,
    })
}

fn decode_setxattr(r: &mut Reader, ctx: &str) -> Result<Item> {
    let ino = r.u64()?;
    let name = xattr_name(r, ctx)?;
    let n = r.u32()? as usize;
    if n > XATTR_VALUE_MAX {
        return Err(Error::corrupt(format!(
            "{ctx}: xattr value of {n} bytes (at most {XATTR_VALUE_MAX})"
        )));
    }
    Ok(Item::SetXattr {
        ino,
        name,
        value: r.bytes(n)?.to_vec(),
    })
}

/// A count, then that many u64s: the count is checked against the bytes
/// left before anything is allocated for it.
fn u64_list(r: &mut Reader, ctx: &str) -> Result<Vec<u64>> {
    let n = r.u32()? as usize;
    let left = r.remaining();
    if n > left / 8 {
        return Err(Error::corrupt(format!(
            "{ctx}: a list of {n} numbers in {left} bytes"
        )));
    }
    (0..n).map(|_| r.u64()).collect()
}

fn decode_stream_record(r: &mut Reader, ctx: &str) -> Result<Item> {
    let (block, seq, nblocks) = (r.u64()?, r.u64()?, r.u32()?);
    // A header block and at least one data block.
    if nblocks < 2 || nblocks as usize > crate::log::record::MAX_RECORD_BLOCKS {
        return Err(Error::corrupt(format!(
            "{ctx}: a stream record of {nblocks} blocks"
        )));
    }
    Ok(Item::StreamRecord {
        block,
        seq,
        nblocks,
    })
}

fn decode_punch(r: &mut Reader, ctx: &str) -> Result<Item> {
    let (ino, offset, length) = (r.u64()?, r.u64()?, r.u64()?);
    // fallocate refuses an empty range and one past the largest file.
    if length == 0
        || offset
            .checked_add(length)
            .is_none_or(|end| end > MAX_FILE_BYTES)
    {
        return Err(Error::corrupt(format!(
            "{ctx}: punch of inode {ino} at {offset} for {length} bytes, empty or past the largest file ({MAX_FILE_BYTES})"
        )));
    }
    Ok(Item::Punch {
        ino,
        offset,
        length,
    })
}

/// A directory entry's name: 1 to 255 bytes, no '/' or NUL, not "." or "..".
fn entry_name(r: &mut Reader, ctx: &str) -> Result<Vec<u8>> {
    let n = r.u8()? as usize;
    let name = r.bytes(n)?;
    if n == 0
        || n > NAME_MAX_BYTES
        || name.contains(&b'/')
        || name.contains(&0)
        || name == b"."
        || name == b".."
    {
        return Err(Error::corrupt(format!(
            "{ctx}: invalid entry name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(name.to_vec())
}

fn xattr_name(r: &mut Reader, ctx: &str) -> Result<Vec<u8>> {
    let n = r.u8()? as usize;
    if n == 0 || n > XATTR_NAME_MAX {
        return Err(Error::corrupt(format!("{ctx}: xattr name of {n} bytes")));
    }
    Ok(r.bytes(n)?.to_vec())
}

/// One line about an item, for `lsfs inspect dump-segment`.
pub fn describe(it: &Item) -> String {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match it {
        Item::Inode { ino, image } => format!("inode image of {ino} ({} bytes)", image.len()),
        Item::Create {
            parent,
            ino,
            mode,
            name,
            target,
            ..
        } => format!(
            "create {ino} mode {mode:o} as {parent}/{:?}{}",
            s(name),
            if target.is_empty() {
                String::new()
            } else {
                format!(" -> {:?}", s(target))
            }
        ),
        Item::Link { ino, parent, name } => format!("link {ino} as {parent}/{:?}", s(name)),
        Item::Unlink { parent, name } => format!("unlink {parent}/{:?}", s(name)),
        Item::Rmdir { parent, name } => format!("rmdir {parent}/{:?}", s(name)),
        Item::Rename {
            parent,
            name,
            newparent,
            newname,
            flags,
        } => format!(
            "rename {parent}/{:?} to {newparent}/{:?} flags {flags:#x}",
            s(name),
            s(newname)
        ),
        Item::Truncate { ino, size } => format!("truncate {ino} to {size}"),
        Item::SetXattr { ino, name, value } => {
            format!("setxattr {ino} {:?} ({} bytes)", s(name), value.len())
        }
        Item::RemoveXattr { ino, name } => format!("removexattr {ino} {:?}", s(name)),
        Item::StreamRecord {
            block,
            seq,
            nblocks,
        } => format!("stream record at block {block}, sequence {seq}, {nblocks} blocks"),
        Item::Punch {
            ino,
            offset,
            length,
        } => format!("punch {ino} bytes {offset}..{}", offset + length),
        Item::Moved {
            give_up_base,
            victims,
            dropped,
            freed,
        } => format!(
            "moved: victims {victims:?} free, {} DAT entries freed, checkpoints {dropped:?} dropped{}",
            freed.len(),
            if *give_up_base {
                ", checkpoints up to the base given up"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Item> {
        vec![
            Item::Create {
                parent: 1,
                ino: 17,
                mode: libc::S_IFREG | 0o644,
                uid: 3,
                gid: 4,
                rdev: 0,
                name: b"foo".to_vec(),
                target: vec![],
            },
            Item::Create {
                parent: 17,
                ino: 18,
                mode: libc::S_IFLNK | 0o777,
                uid: 0,
                gid: 0,
                rdev: 0,
                name: b"l".to_vec(),
                target: b"../x".to_vec(),
            },
            Item::Link {
                ino: 17,
                parent: 1,
                name: b"bar".to_vec(),
            },
            Item::Unlink {
                parent: 1,
                name: b"foo".to_vec(),
            },
            Item::Rmdir {
                parent: 1,
                name: b"d".to_vec(),
            },
            Item::Rename {
                parent: 1,
                name: b"a".to_vec(),
                newparent: 20,
                newname: vec![b'n'; 255],
                flags: lsfs_vfs::RENAME_EXCHANGE,
            },
            Item::Truncate { ino: 17, size: 5 },
            Item::Punch {
                ino: 17,
                offset: 4095,
                length: 8194,
            },
            Item::SetXattr {
                ino: 17,
                name: b"user.x".to_vec(),
                value: vec![7; 3000],
            },
            Item::RemoveXattr {
                ino: 17,
                name: b"user.x".to_vec(),
            },
            Item::Inode {
                ino: 17,
                image: vec![1; 140],
            },
        ]
    }

    #[test]
    fn items_round_trip_and_say_their_length() {
        let items = samples();
        let b = encode(&items);
        assert_eq!(b.len(), items.iter().map(Item::encoded_len).sum::<usize>());
        assert_eq!(decode(&b, "test").unwrap(), items);
        assert_eq!(decode(&[], "test").unwrap(), vec![]);
    }

    /// Any cut of the bytes, and any byte changed, is an error or another
    /// valid list: never a panic, never a read past the end.
    #[test]
    fn damaged_items_are_refused_with_their_place() {
        let b = encode(&samples());
        for cut in 0..b.len() {
            let _ = decode(&b[..cut], "test");
        }
        for i in 0..b.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut d = b.clone();
                d[i] ^= x;
                let _ = decode(&d, "test");
            }
        }
        let mut d = b.clone();
        d[0] = 99;
        let e = decode(&d, "record at block 5").unwrap_err().to_string();
        assert!(
            e.contains("record at block 5: item 0") && e.contains("unknown item type 99"),
            "{e}"
        );
        // A length past the end names the item.
        let mut d = encode(&samples()[..1]);
        d[1] = 0xff;
        let e = decode(&d, "r").unwrap_err().to_string();
        assert!(e.contains("item 0 (create)") && e.contains("claims"), "{e}");
    }

    #[test]
    fn invalid_names_modes_and_flags_are_corrupt() {
        let bad = [
            Item::Unlink {
                parent: 1,
                name: b"a/b".to_vec(),
            },
            Item::Unlink {
                parent: 1,
                name: b"..".to_vec(),
            },
            Item::Rename {
                parent: 1,
                name: b"a".to_vec(),
                newparent: 1,
                newname: b"b".to_vec(),
                flags: 3,
            },
            Item::Create {
                parent: 1,
                ino: 17,
                mode: 0o644,
                uid: 0,
                gid: 0,
                rdev: 0,
                name: b"x".to_vec(),
                target: vec![],
            },
            Item::Create {
                parent: 1,
                ino: 17,
                mode: libc::S_IFREG | 0o644,
                uid: 0,
                gid: 0,
                rdev: 0,
                name: b"x".to_vec(),
                target: b"t".to_vec(),
            },
            Item::Inode {
                ino: 3,
                image: vec![0; 100],
            },
            Item::Truncate {
                ino: 17,
                size: MAX_FILE_BYTES + 1,
            },
            Item::Punch {
                ino: 17,
                offset: 5,
                length: 0,
            },
            Item::Punch {
                ino: 17,
                offset: MAX_FILE_BYTES - 1,
                length: 2,
            },
            Item::Punch {
                ino: 17,
                offset: u64::MAX,
                length: 2,
            },
        ];
        for it in bad {
            assert!(
                decode(&encode(std::slice::from_ref(&it)), "t").is_err(),
                "{it:?} accepted"
            );
        }
    }
}
