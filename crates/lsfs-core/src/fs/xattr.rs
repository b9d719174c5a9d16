//! Extended attributes: a B-tree per inode (root `xattr_root`), keyed like
//! directory entries by name hash plus a collision index; the value holds
//! the name and the attribute value.

use crate::error::{Error, Result};
use crate::fs::dir::name_hash;
use crate::fs::inode::Inode;
use crate::meta::store::{Store, VNodes, VNodesRo};
use lsfs_vfs::Errno;

/// Longest attribute name, as Linux.
pub const XATTR_NAME_MAX_BYTES: usize = 255;
/// Longest value: what fits in one B-tree item with the name.
pub const XATTR_VALUE_MAX_BYTES: usize = crate::btree::MAX_VALUE_BYTES - 1 - XATTR_NAME_MAX_BYTES;

fn items(s: &mut Store, root: u64, name: &[u8]) -> Result<Vec<(u64, Vec<u8>, Vec<u8>)>> {
    let base = name_hash(name);
    let tree = s.tree();
    let mut out = Vec::new();
    let mut k = base;
    while let Some((key, v)) = tree.ceil(&mut VNodesRo { s }, root, k)? {
        if key > base | 0xff {
            break;
        }
        let (n, val) = split(key, &v)?;
        out.push((key, n, val));
        k = key + 1;
    }
    Ok(out)
}

fn split(key: u64, v: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let n = *v
        .first()
        .ok_or_else(|| Error::corrupt(format!("xattr item {key:#x} is empty")))?
        as usize;
    if v.len() < 1 + n {
        return Err(Error::corrupt(format!(
            "xattr item {key:#x}: name of {n} bytes in {} bytes",
            v.len()
        )));
    }
    Ok((v[1..1 + n].to_vec(), v[1 + n..].to_vec()))
}

pub fn get(s: &mut Store, ino: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(items(s, ino.xattr_root, name)?
        .into_iter()
        .find(|(_, n, _)| n == name)
        .map(|(_, _, v)| v))
}

pub fn set(s: &mut Store, ino: &mut Inode, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX_BYTES {
        return Err(Error::Errno(Errno::RANGE));
    }
    if value.len() > XATTR_VALUE_MAX_BYTES {
        return Err(Error::Errno(Errno::E2BIG));
    }
    let run = items(s, ino.xattr_root, name)?;
    let existing = run.iter().find(|(_, n, _)| n == name).map(|(k, _, _)| *k);
    if existing.is_some() && flags & lsfs_vfs::XATTR_CREATE != 0 {
        return Err(Error::Errno(Errno::EXIST));
    }
    if existing.is_none() && flags & lsfs_vfs::XATTR_REPLACE != 0 {
        return Err(Error::Errno(Errno::NODATA));
    }
    let base = name_hash(name);
    let key = match existing {
        Some(k) => k,
        None => (base..=base | 0xff)
            .find(|k| !run.iter().any(|(rk, _, _)| rk == k))
            .ok_or(Error::Errno(Errno::NOSPC))?,
    };
    let mut item = vec![name.len() as u8];
    item.extend_from_slice(name);
    item.extend_from_slice(value);
    let tree = s.tree();
    tree.insert(
        &mut VNodes { s, ino: ino.ino },
        &mut ino.xattr_root,
        key,
        &item,
    )?;
    Ok(())
}

pub fn remove(s: &mut Store, ino: &mut Inode, name: &[u8]) -> Result<()> {
    let run = items(s, ino.xattr_root, name)?;
    let key = run
        .iter()
        .find(|(_, n, _)| n == name)
        .map(|(k, _, _)| *k)
        .ok_or(Error::Errno(Errno::NODATA))?;
    let tree = s.tree();
    tree.remove(&mut VNodes { s, ino: ino.ino }, &mut ino.xattr_root, key)?;
    Ok(())
}

pub fn list(s: &mut Store, ino: &Inode) -> Result<Vec<Vec<u8>>> {
    let tree = s.tree();
    let mut out = Vec::new();
    let mut k = 0;
    while let Some((key, v)) = tree.ceil(&mut VNodesRo { s }, ino.xattr_root, k)? {
        out.push(split(key, &v)?.0);
        k = key + 1;
    }
    Ok(out)
}
