//! A bounded cache of segment objects on local disk, for a read-write
//! mount: a segment read again after it left the memory cache (or after a
//! remount) comes from local disk instead of a GET. One file per object,
//! holding the object as stored followed by its CRC-32C, written to a
//! temporary name and renamed; an entry that does not verify is deleted
//! and fetched from the store again. The least recently used entries are
//! deleted beyond the bound; uses are counted in memory, and at open the
//! entries found are ordered by their modification times.
//!
//! Entries must be the store's objects. The device removes an entry
//! before it uploads or deletes the object and writes it again once the
//! upload succeeded, so a crash leaves no entry older than its object.
//! Only a writer changes objects, and it holds the lease; but another
//! writer (another machine, or a mount without this cache) may have
//! changed them between two mounts with the cache. Every read-write open
//! writes a random id to the store's `writer` object. `owner.json` names
//! the store's URL, and, written at a clean close, the file system's id,
//! the superblocks' sequence number and the `writer` id then; an open
//! that finds anything else (another file system, a close that never
//! happened, another writer since) empties the cache first.
//!
//! A read-only mount, which changes nothing, may keep a cache too
//! ([`DiskCache::open_for_readers`]): there the writer changes the objects
//! behind its back, so each entry also keeps the ETag the store gave its
//! object, and the reader serves an entry only after the store has said,
//! to a GET conditional on that ETag (`If-None-Match`), that the object is
//! still the same: a round trip without the object's bytes. Entries
//! without an ETag (a writer's) are never served to a reader, and a
//! writer empties a cache a reader used (its `owner.json` never says
//! closed).
//!
//! An entry file is the object as stored, then its ETag (empty for a
//! writer's entries), the ETag's length (2 bytes, little-endian) and the
//! CRC-32C of all that (4 bytes).

use crate::layout::Obj;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Default bound: 1 GiB.
pub const DEFAULT_DISK_CACHE_BYTES: u64 = 1 << 30;

const OWNER: &str = "owner.json";
const LOCK: &str = "lock";

/// The store's state the entries match, written at a clean close.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub url: String,
    /// `None` while a mount uses the cache.
    pub closed_at: Option<StoreMark>,
}

/// The file system's id, its superblocks' newest sequence number, and the
/// id of the read-write open that came last (the `writer` object).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMark {
    pub fs_id: u64,
    pub sb_seq: u64,
    pub writer: u64,
}

struct Entry {
    bytes: u64,
    used: u64,
}

pub struct DiskCache {
    /// Locked (`flock`) while open: two mounts must not share a cache.
    _lock: std::fs::File,
    dir: PathBuf,
    max_bytes: u64,
    entries: HashMap<Obj, Entry>,
    uses: u64,
    bytes: u64,
    url: String,
    pub hits: u64,
    pub misses: u64,
}

fn file_name(o: Obj) -> String {
    o.name().replace('/', "-")
}

fn obj_of(name: &str) -> Option<Obj> {
    let n = name.strip_prefix("seg-")?.parse().ok()?;
    Some(Obj::Segment(n))
}

/// An entry file's object (`want` bytes) and ETag, if it verifies.
fn parse_entry(mut b: Vec<u8>, want: usize) -> Option<(Vec<u8>, String)> {
    let body = b.len().checked_sub(4)?;
    let (head, crc) = b.split_at(body);
    if crc32c::crc32c(head).to_le_bytes() != crc {
        return None;
    }
    let at = body.checked_sub(2)?;
    let tag_len = u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    if want + tag_len != at {
        return None;
    }
    let tag = String::from_utf8(b[want..at].to_vec()).ok()?;
    b.truncate(want);
    Some((b, tag))
}

fn err(dir: &Path, e: std::io::Error) -> String {
    format!("object_disk_cache {}: {e}", dir.display())
}

impl DiskCache {
    /// Open the cache in `dir` (made if missing) for the store at `url`
    /// whose state is now `now`; empties it unless it was closed cleanly
    /// at exactly that state, then marks it in use.
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        url: &str,
        now: StoreMark,
    ) -> Result<DiskCache, String> {
        Self::open_as(dir, max_bytes, url, Some(now))
    }

    /// Open the cache in `dir` for a read-only mount of the store at
    /// `url`: entries of the same store are kept whatever the store's state
    /// (each is checked against its object's ETag before use), and the
    /// cache stays marked in use, never closed.
    pub fn open_for_readers(dir: &Path, max_bytes: u64, url: &str) -> Result<DiskCache, String> {
        Self::open_as(dir, max_bytes, url, None)
    }

    /// `now`: the store's state for a writer's open; `None` for a reader's.
    fn open_as(
        dir: &Path,
        max_bytes: u64,
        url: &str,
        now: Option<StoreMark>,
    ) -> Result<DiskCache, String> {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK))
            .map_err(|e| err(dir, e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(format!(
                "object_disk_cache {} is in use by another mount",
                dir.display()
            ));
        }
        let owner: Option<Owner> = std::fs::read(dir.join(OWNER))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let valid = owner.as_ref().is_some_and(|o| {
            o.url.trim_end_matches('/') == url.trim_end_matches('/')
                && (now.is_none() || o.closed_at == now)
        });
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| err(dir, e))? {
            let e = e.map_err(|e| err(dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == OWNER || name == LOCK {
                continue;
            }
            match obj_of(&name) {
                Some(o) if valid => {
                    let m = e.metadata().map_err(|e| err(dir, e))?;
                    found.push((m.modified().ok(), o, m.len()));
                }
                // Stale, a temporary file left by a crash, or not ours.
                _ if name.starts_with("seg-") || name.starts_with(".tmp-") => {
                    let _ = std::fs::remove_file(e.path());
                }
                _ => {}
            }
        }
        if owner.is_some() && !valid {
            tracing::info!(
                "object_disk_cache {}: emptied (another file system, a mount that did not \
                 close, or the store changed since)",
                dir.display()
            );
        }
        found.sort();
        let mut c = DiskCache {
            _lock: lock,
            dir: dir.to_path_buf(),
            max_bytes,
            entries: HashMap::new(),
            uses: 0,
            bytes: 0,
            url: url.to_string(),
            hits: 0,
            misses: 0,
        };
        for (_, o, bytes) in found {
            c.uses += 1;
            c.bytes += bytes;
            c.entries.insert(
                o,
                Entry {
                    bytes,
                    used: c.uses,
                },
            );
        }
        c.write_owner(None)?;
        c.evict();
        Ok(c)
    }

    fn write_owner(&self, closed_at: Option<StoreMark>) -> Result<(), String> {
        let body = serde_json::to_vec(&Owner {
            url: self.url.clone(),
            closed_at,
        })
        .expect("an owner serializes");
        let tmp = self.dir.join(".tmp-owner");
        std::fs::write(&tmp, body).map_err(|e| err(&self.dir, e))?;
        // Durable before the mount writes anything: a crash must find the
        // cache marked in use, not closed at a state it no longer matches.
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| err(&self.dir, e))?;
        std::fs::rename(&tmp, self.dir.join(OWNER)).map_err(|e| err(&self.dir, e))?;
        std::fs::File::open(&self.dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| err(&self.dir, e))
    }

    /// Mark the cache closed at `now`: its entries match the store then.
    pub fn close(&self, now: StoreMark) -> Result<(), String> {
        self.write_owner(Some(now))
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether `o` is held (not read, so not verified).
    pub fn holds(&self, o: Obj) -> bool {
        self.entries.contains_key(&o)
    }

    /// Object `o`, `want` bytes long, and the ETag kept with it (empty
    /// for a writer's entries), if held and it verifies.
    pub fn get(&mut self, o: Obj, want: u64) -> Option<(Vec<u8>, String)> {
        if !self.entries.contains_key(&o) {
            self.misses += 1;
            return None;
        }
        let path = self.dir.join(file_name(o));
        let ok = std::fs::read(&path)
            .ok()
            .and_then(|b| parse_entry(b, want as usize));
        match ok {
            Some(got) => {
                self.uses += 1;
                self.entries.get_mut(&o).expect("held").used = self.uses;
                self.hits += 1;
                Some(got)
            }
            None => {
                tracing::warn!(
                    "object_disk_cache: {} does not verify; fetching the object again",
                    path.display()
                );
                self.remove(o);
                self.misses += 1;
                None
            }
        }
    }

    /// Hold `data` as object `o` (a segment as the store has it, with the
    /// ETag the store gave it, or "" for a writer), the least recently
    /// used entries deleted to stay within the bound.
    pub fn put(&mut self, o: Obj, data: &[u8], etag: &str) {
        let tag = &etag.as_bytes()[..etag.len().min(u16::MAX as usize)];
        let len = data.len() + tag.len() + 2 + 4;
        if !matches!(o, Obj::Segment(_)) || len as u64 > self.max_bytes {
            return;
        }
        self.remove(o);
        let tmp = self.dir.join(format!(".tmp-{}", file_name(o)));
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(data);
        b.extend_from_slice(tag);
        b.extend_from_slice(&(tag.len() as u16).to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
        let r = std::fs::write(&tmp, &b)
            .and_then(|_| std::fs::rename(&tmp, self.dir.join(file_name(o))));
        if let Err(e) = r {
            // A cache that cannot write only costs GETs.
            tracing::warn!("object_disk_cache {}: {e}", self.dir.display());
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        self.uses += 1;
        self.bytes += b.len() as u64;
        self.entries.insert(
            o,
            Entry {
                bytes: b.len() as u64,
                used: self.uses,
            },
        );
        self.evict();
    }

    /// Forget object `o` (it is about to change in the store).
    pub fn remove(&mut self, o: Obj) {
        if let Some(e) = self.entries.remove(&o) {
            self.bytes -= e.bytes;
            let _ = std::fs::remove_file(self.dir.join(file_name(o)));
        }
    }

    /// Drop the hit counted for `o`: a reader found its entry stale.
    pub fn stale(&mut self, o: Obj) {
        self.hits = self.hits.saturating_sub(1);
        self.misses += 1;
        self.remove(o);
    }

    fn evict(&mut self) {
        while self.bytes > self.max_bytes {
            let Some(o) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(o, _)| *o)
            else {
                return;
            };
            self.remove(o);
        }
    }
}
