//! Directories: entries keyed by a 64-bit name hash (yFS's hashed
//! directories), inline in the inode while small and a B-tree after that.
//!
//! Key = `hash(name)` with its low 8 bits cleared, plus a collision index
//! 0..=255: names whose hashes collide take the next free index. A key never
//! changes while its entry exists, so `key + 3` is a readdir cookie that stays
//! valid across concurrent inserts and deletes ("." and ".." use 1 and 2).

use crate::error::{Error, Result};
use crate::fs::inode::Inode;
use crate::fs::map;
use crate::meta::store::Store;
use lsfs_vfs::{Errno, FileKind};

/// Cookies of "." and "..".
pub const COOKIE_DOT: u64 = 1;
pub const COOKIE_DOTDOT: u64 = 2;
const COOKIE_BASE: u64 = 3;

pub fn name_hash(name: &[u8]) -> u64 {
    // FNV-1a: stable across builds and platforms, which the on-disk keys need.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Keys stay below 2^62 so that cookies (key + 3) never overflow.
    (h >> 2) & !0xff
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: u64,
    pub ino: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
}

fn kind_code(k: FileKind) -> u8 {
    match k {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDev => 6,
        FileKind::BlockDev => 7,
    }
}

fn kind_from(c: u8) -> Option<FileKind> {
    Some(match c {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDev,
        7 => FileKind::BlockDev,
        _ => return None,
    })
}

fn encode(ino: u64, kind: FileKind, name: &[u8]) -> Vec<u8> {
    let mut v = ino.to_le_bytes().to_vec();
    v.push(kind_code(kind));
    v.extend_from_slice(name);
    v
}

pub(crate) fn decode(key: u64, v: &[u8]) -> Result<Entry> {
    if v.len() < 10 || v.len() > 9 + lsfs_vfs::NAME_MAX_BYTES {
        return Err(Error::corrupt(format!(
            "directory entry {key:#x}: {} bytes",
            v.len()
        )));
    }
    let kind = kind_from(v[8])
        .ok_or_else(|| Error::corrupt(format!("directory entry {key:#x}: type {}", v[8])))?;
    Ok(Entry {
        key,
        ino: u64::from_le_bytes(v[..8].try_into().unwrap()),
        kind,
        name: v[9..].to_vec(),
    })
}

/// The entries whose key shares `name`'s hash (the collision run).
fn run(s: &mut Store, dir: &Inode, name: &[u8]) -> Result<Vec<Entry>> {
    let base = name_hash(name);
    let mut out = Vec::new();
    let mut k = base;
    while let Some((key, v)) = map::get_ceil(s, dir, k)? {
        if key > base | 0xff {
            break;
        }
        out.push(decode(key, &v)?);
        k = key + 1;
    }
    Ok(out)
}

pub fn lookup(s: &mut Store, dir: &Inode, name: &[u8]) -> Result<Option<Entry>> {
    Ok(run(s, dir, name)?.into_iter().find(|e| e.name == name))
}

/// Add an entry; the caller has checked that `name` is absent.
pub fn insert(s: &mut Store, dir: &mut Inode, name: &[u8], ino: u64, kind: FileKind) -> Result<()> {
    let base = name_hash(name);
    let used: Vec<u64> = run(s, dir, name)?.iter().map(|e| e.key).collect();
    let key = (base..=base | 0xff)
        .find(|k| !used.contains(k))
        .ok_or(Error::Errno(Errno::NOSPC))?; // 256 names with one hash: astronomically unlikely
    map::insert(s, dir, key, &encode(ino, kind, name))?;
    dir.size += 1;
    Ok(())
}

pub fn remove(s: &mut Store, dir: &mut Inode, name: &[u8]) -> Result<Option<Entry>> {
    let Some(e) = lookup(s, dir, name)? else {
        return Ok(None);
    };
    map::remove(s, dir, e.key)?;
    dir.size = dir.size.saturating_sub(1);
    Ok(Some(e))
}

/// Point an existing entry at another inode (rename over an existing name).
pub fn replace(s: &mut Store, dir: &mut Inode, e: &Entry, ino: u64, kind: FileKind) -> Result<()> {
    map::insert(s, dir, e.key, &encode(ino, kind, &e.name))
}

/// Up to `max` entries after `cookie` (not counting "." and ".."), with their cookies.
pub fn list_after(
    s: &mut Store,
    dir: &Inode,
    cookie: u64,
    max: usize,
) -> Result<Vec<(u64, Entry)>> {
    let mut k = if cookie < COOKIE_BASE {
        0
    } else {
        cookie - COOKIE_BASE + 1
    };
    let mut out = Vec::new();
    while out.len() < max {
        // A leaf at a time.
        let run = map::get_ceil_run(s, dir, k, max - out.len())?;
        if run.is_empty() {
            break;
        }
        for (key, v) in run {
            if key >= 1 << 62 {
                // name_hash never makes such keys; on a damaged image the
                // cookie (key + 3) and the next key would overflow.
                return Err(Error::corrupt(format!(
                    "directory {}: entry key {key:#x} is out of range",
                    dir.ino
                )));
            }
            out.push((key + COOKIE_BASE, decode(key, &v)?));
            k = key + 1;
        }
    }
    Ok(out)
}

pub fn is_empty(s: &mut Store, dir: &Inode) -> Result<bool> {
    Ok(map::get_ceil(s, dir, 0)?.is_none())
}
