//! Extended attributes: a B-tree per inode (root `xattr_root`).
//!
//! Key = `name_hash(name)` with its low 16 bits replaced by a collision
//! index (8 bits) and a chunk index (8 bits). Chunk 0 holds the name length
//! (u8), the name, the value length (u32) and the first part of the value;
//! chunks 1.. hold the rest, [`CHUNK_BYTES`] each, so values up to Linux's
//! 64 KiB limit fit.

use crate::error::{Error, Result};
use crate::fs::dir::name_hash;
use crate::fs::inode::Inode;
use crate::meta::store::{Store, VNodes, VNodesRo};
use lsfs_vfs::Errno;

/// Longest attribute name, as Linux.
pub const XATTR_NAME_MAX_BYTES: usize = 255;
/// Longest value, as Linux (XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX_BYTES: usize = 65536;
/// Value bytes per B-tree item.
const CHUNK_BYTES: usize = 1500;

fn base(name: &[u8]) -> u64 {
    name_hash(name) & !0xffff
}

/// One attribute as stored: its collision slot, name, and value.
pub(crate) struct Found {
    slot: u64,
    name: Vec<u8>,
    total: usize,
    first: Vec<u8>,
}

pub(crate) fn decode_head(key: u64, v: &[u8]) -> Result<Found> {
    let bad = || {
        Error::corrupt(format!(
            "xattr item {key:#x} is malformed ({} bytes)",
            v.len()
        ))
    };
    let n = *v.first().ok_or_else(bad)? as usize;
    if v.len() < 1 + n + 4 {
        return Err(bad());
    }
    let total = u32::from_le_bytes(v[1 + n..5 + n].try_into().unwrap()) as usize;
    if total > XATTR_VALUE_MAX_BYTES {
        return Err(bad());
    }
    Ok(Found {
        slot: (key >> 8) & 0xff,
        name: v[1..1 + n].to_vec(),
        total,
        first: v[5 + n..].to_vec(),
    })
}

/// The attributes whose names share `name`'s hash.
fn heads(s: &mut Store, root: u64, lo: u64, hi: u64) -> Result<Vec<Found>> {
    let tree = s.tree();
    let mut out = Vec::new();
    let mut k = lo;
    while let Some((key, v)) = tree.ceil(&mut VNodesRo { s }, root, k)? {
        if key > hi {
            break;
        }
        if key >= 1 << 62 {
            // Names hash below 2^62 (`name_hash`); on a damaged image the
            // next key, `key + 1`, would overflow.
            return Err(Error::corrupt(format!(
                "xattr item {key:#x} of the tree at {root}: key out of range"
            )));
        }
        if key & 0xff == 0 {
            out.push(decode_head(key, &v)?);
        }
        k = key + 1;
    }
    Ok(out)
}

fn find(s: &mut Store, ino: &Inode, name: &[u8]) -> Result<(Vec<Found>, Option<usize>)> {
    let b = base(name);
    let run = heads(s, ino.xattr_root, b, b | 0xffff)?;
    let i = run.iter().position(|f| f.name == name);
    Ok((run, i))
}

pub fn get(s: &mut Store, ino: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
    let (run, i) = find(s, ino, name)?;
    let Some(f) = i.map(|i| &run[i]) else {
        return Ok(None);
    };
    let mut value = f.first.clone();
    let key0 = base(name) | (f.slot << 8);
    let tree = s.tree();
    let mut chunk = 1;
    while value.len() < f.total {
        let part = tree
            .get(&mut VNodesRo { s }, ino.xattr_root, key0 | chunk)?
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "xattr of inode {}: chunk {chunk} is missing",
                    ino.ino
                ))
            })?;
        value.extend_from_slice(&part);
        chunk += 1;
    }
    if value.len() != f.total {
        return Err(Error::corrupt(format!(
            "xattr of inode {}: {} bytes, header says {}",
            ino.ino,
            value.len(),
            f.total
        )));
    }
    Ok(Some(value))
}

fn remove_chunks(
    s: &mut Store,
    ino: &mut Inode,
    key0: u64,
    total: usize,
    first: usize,
) -> Result<()> {
    let tree = s.tree();
    let nchunks = 1 + total.saturating_sub(first).div_ceil(CHUNK_BYTES) as u64;
    for c in 0..nchunks {
        tree.remove(
            &mut VNodes { s, ino: ino.ino },
            &mut ino.xattr_root,
            key0 | c,
        )?;
    }
    Ok(())
}

pub fn set(s: &mut Store, ino: &mut Inode, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX_BYTES {
        return Err(Error::Errno(Errno::RANGE));
    }
    if value.len() > XATTR_VALUE_MAX_BYTES {
        return Err(Error::Errno(Errno::E2BIG));
    }
    let (run, i) = find(s, ino, name)?;
    if i.is_some() && flags & lsfs_vfs::XATTR_CREATE != 0 {
        return Err(Error::Errno(Errno::EXIST));
    }
    if i.is_none() && flags & lsfs_vfs::XATTR_REPLACE != 0 {
        return Err(Error::Errno(Errno::NODATA));
    }
    let slot = match i {
        Some(i) => {
            let f = &run[i];
            remove_chunks(s, ino, base(name) | (f.slot << 8), f.total, f.first.len())?;
            f.slot
        }
        None => (0..256u64)
            .find(|c| !run.iter().any(|f| f.slot == *c))
            .ok_or(Error::Errno(Errno::NOSPC))?,
    };
    let key0 = base(name) | (slot << 8);
    let first_len = value
        .len()
        .min(CHUNK_BYTES - 5 - name.len().min(CHUNK_BYTES / 2))
        .min(value.len());
    let mut head = vec![name.len() as u8];
    head.extend_from_slice(name);
    head.extend_from_slice(&(value.len() as u32).to_le_bytes());
    head.extend_from_slice(&value[..first_len]);
    let tree = s.tree();
    tree.insert(
        &mut VNodes { s, ino: ino.ino },
        &mut ino.xattr_root,
        key0,
        &head,
    )?;
    for (c, part) in value[first_len..].chunks(CHUNK_BYTES).enumerate() {
        tree.insert(
            &mut VNodes { s, ino: ino.ino },
            &mut ino.xattr_root,
            key0 | (c as u64 + 1),
            part,
        )?;
    }
    Ok(())
}

pub fn remove(s: &mut Store, ino: &mut Inode, name: &[u8]) -> Result<()> {
    let (run, i) = find(s, ino, name)?;
    let f = &run[i.ok_or(Error::Errno(Errno::NODATA))?];
    remove_chunks(s, ino, base(name) | (f.slot << 8), f.total, f.first.len())
}

pub fn list(s: &mut Store, ino: &Inode) -> Result<Vec<Vec<u8>>> {
    Ok(heads(s, ino.xattr_root, 0, u64::MAX)?
        .into_iter()
        .map(|f| f.name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsfs_vfs::Timespec;

    /// A damaged xattr tree with a key at `u64::MAX`: listing stepped past
    /// it with `key + 1`, which overflowed. Keys past what names hash to
    /// are refused where they are read.
    #[test]
    fn key_past_every_name_hash_is_corrupt() {
        let mut s = Store::small_for_test();
        let now = Timespec { sec: 0, nsec: 0 };
        let mut i = Inode::new(16, libc::S_IFREG | 0o644, 0, 0, now);
        set(&mut s, &mut i, b"user.a", b"xyz", 0).unwrap();
        assert_eq!(list(&mut s, &i).unwrap(), vec![b"user.a".to_vec()]);
        // A value chunk (its low byte is not 0) under the last key.
        let tree = s.tree();
        tree.insert(
            &mut VNodes { s: &mut s, ino: 16 },
            &mut i.xattr_root,
            u64::MAX,
            b"chunk",
        )
        .unwrap();
        let e = list(&mut s, &i).unwrap_err().to_string();
        assert!(e.contains("key out of range"), "{e}");
    }
}
