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
            o.url.trim_end_matches('/') == url.trim_end_matches('/') && o.closed_at == Some(now)
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

    /// Object `o`, `want` bytes long, if held and it verifies.
    pub fn get(&mut self, o: Obj, want: u64) -> Option<Vec<u8>> {
        if !self.entries.contains_key(&o) {
            self.misses += 1;
            return None;
        }
        let path = self.dir.join(file_name(o));
        let ok = std::fs::read(&path).ok().filter(|b| {
            b.len() as u64 == want + 4 && {
                let (data, crc) = b.split_at(want as usize);
                crc32c::crc32c(data).to_le_bytes() == crc
            }
        });
        match ok {
            Some(mut b) => {
                b.truncate(want as usize);
                self.uses += 1;
                self.entries.get_mut(&o).expect("held").used = self.uses;
                self.hits += 1;
                Some(b)
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

    /// Hold `data` as object `o` (a segment as the store has it), the
    /// least recently used entries deleted to stay within the bound.
    pub fn put(&mut self, o: Obj, data: &[u8]) {
        if !matches!(o, Obj::Segment(_)) || data.len() as u64 + 4 > self.max_bytes {
            return;
        }
        self.remove(o);
        let tmp = self.dir.join(format!(".tmp-{}", file_name(o)));
        let mut b = Vec::with_capacity(data.len() + 4);
        b.extend_from_slice(data);
        b.extend_from_slice(&crc32c::crc32c(data).to_le_bytes());
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
