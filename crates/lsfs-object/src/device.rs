//! [`ObjectDevice`]: a [`BlockDevice`] whose bytes live in objects
//! (`layout.rs`).
//!
//! The device keeps the objects it touches in memory, whole: a read of any
//! part of a segment fetches the segment with one GET (the read-ahead a
//! log wants: a segment's records are read together), and later reads of
//! it are served from memory while it stays among the most recently used
//! within the cache bound. A write changes the object in memory and marks
//! it changed; a flush uploads every changed object whole, all at once,
//! and returns when the store has them: an object store's PUT is atomic
//! and durable when it returns, so what a flush covered survives a crash
//! of the machine, the process or the connection, and a half-uploaded
//! object is never seen. Changed objects also go up before a flush when
//! they would hold more than half the cache (a device may make writes
//! durable early; only a flush promises it).
//!
//! What this costs: an fsync uploads the segments its records went into
//! whole (up to the segment size, 2 MiB by default, per fsync), where
//! records of their own folded later would upload only the record; that
//! is left for later (docs/OBJECT_STORE.md). Every request holds the
//! device's lock, so reads and writes do not overlap one another's
//! round trips; the FUSE adapter still finishes device work outside the
//! engine's lock.
//!
//! Errors from the store (after the store's own retries with backoff,
//! bounded by `LSFS_OBJECT_RETRIES` and `LSFS_OBJECT_RETRY_SECS` for S3:
//! `target::retry_config`) are device errors: the engine fails the request
//! with EIO and turns the mount read-only, as for a disk.

use crate::layout::{Geometry, Obj, Piece, FORMAT};
use crate::lease;
use crate::target::Target;
use lsfs_core::device::{BlockDevice, DeviceStats};
use lsfs_core::error::{Error, Result};
use object_store::{PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::runtime::Runtime;

/// Default bound on the objects kept in memory (64 MiB: 32 segments of
/// the default 2 MiB).
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

/// `geometry.json`.
#[derive(Debug, Serialize, Deserialize)]
struct GeometryFile {
    format: String,
    block_bytes: u64,
    #[serde(flatten)]
    geo: Geometry,
}

/// Requests to the store and their bytes, since the device was opened.
#[derive(Debug, Default)]
pub struct ObjectStats {
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub deletes: AtomicU64,
}

/// A copy of [`ObjectStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ObjectCounters {
    pub gets: u64,
    pub get_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
}

struct Entry {
    data: Vec<u8>,
    dirty: bool,
    /// When it was last used, in the cache's own count of uses.
    used: u64,
}

#[derive(Default)]
struct Cache {
    objs: HashMap<Obj, Entry>,
    uses: u64,
    bytes: u64,
    dirty_bytes: u64,
}

pub struct ObjectDevice {
    target: Target,
    geo: Geometry,
    rt: Runtime,
    cache: Mutex<Cache>,
    cache_bytes: u64,
    /// Holding the lease (a writable device until it is released).
    leased: AtomicBool,
    stats: DeviceStats,
    ostats: ObjectStats,
}

fn io(what: String, e: object_store::Error) -> Error {
    Error::io(what, std::io::Error::other(e.to_string()))
}

fn runtime() -> std::result::Result<Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lsfs-object")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the object store's runtime: {e}"))
}

impl ObjectDevice {
    /// Lay out a new device of `geo` at `t`: write `geometry.json`. Refused
    /// if one is there, unless `force`, which also deletes every segment
    /// object left by the file system there before.
    pub fn create(t: &Target, geo: Geometry, force: bool) -> std::result::Result<(), String> {
        geo.validate()?;
        let rt = runtime()?;
        if force {
            delete_all(t, &rt)?;
        }
        let body = serde_json::to_vec_pretty(&GeometryFile {
            format: FORMAT.into(),
            block_bytes: crate::layout::BLOCK,
            geo,
        })
        .expect("a geometry serializes");
        let opts = PutOptions {
            mode: if force {
                PutMode::Overwrite
            } else {
                PutMode::Create
            },
            ..Default::default()
        };
        match rt.block_on(
            t.store
                .put_opts(&t.path("geometry.json"), PutPayload::from(body), opts),
        ) {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(format!(
                "{} already holds an lsfs file system; use --force to overwrite it",
                t.url
            )),
            Err(e) => Err(format!("{}: writing geometry.json: {e}", t.url)),
        }
    }

    /// Whether `t` holds a device (its `geometry.json`).
    pub fn exists(t: &Target) -> std::result::Result<bool, String> {
        let rt = runtime()?;
        match rt.block_on(t.store.head(&t.path("geometry.json"))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(format!("{}: {e}", t.url)),
        }
    }

    /// Open the device at `t`; a writable one takes the lease (`lease.rs`).
    /// `cache_bytes` bounds the objects kept in memory.
    pub fn open(
        t: &Target,
        writable: bool,
        cache_bytes: u64,
    ) -> std::result::Result<ObjectDevice, String> {
        let rt = runtime()?;
        let geo = read_geometry(t, &rt)?;
        if writable {
            lease::acquire(t, &rt)?;
        }
        Ok(ObjectDevice {
            target: t.clone(),
            geo,
            rt,
            cache: Mutex::new(Cache::default()),
            cache_bytes: cache_bytes.max(4 * geo.segment_blocks * crate::layout::BLOCK),
            leased: AtomicBool::new(writable),
            stats: DeviceStats::default(),
            ostats: ObjectStats::default(),
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Requests to the store since the device was opened.
    pub fn object_counters(&self) -> ObjectCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &self.ostats;
        ObjectCounters {
            gets: l(&s.gets),
            get_bytes: l(&s.get_bytes),
            puts: l(&s.puts),
            put_bytes: l(&s.put_bytes),
            deletes: l(&s.deletes),
        }
    }

    /// Object `o` in the cache, fetched if it is not (absent: zeros).
    fn load<'c>(&self, c: &'c mut Cache, o: Obj) -> Result<&'c mut Entry> {
        c.uses += 1;
        let uses = c.uses;
        if !c.objs.contains_key(&o) {
            let want = self.geo.obj_bytes(o);
            let path = self.target.path(&o.name());
            let got = self
                .rt
                .block_on(async { self.target.store.get(&path).await?.bytes().await });
            let data = match got {
                Ok(b) => {
                    self.ostats.gets.fetch_add(1, Ordering::Relaxed);
                    self.ostats
                        .get_bytes
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    if b.len() as u64 != want {
                        return Err(Error::corrupt(format!(
                            "object {path} holds {} bytes; the layout in geometry.json says {want}",
                            b.len()
                        )));
                    }
                    b.to_vec()
                }
                Err(object_store::Error::NotFound { .. }) => vec![0; want as usize],
                Err(e) => return Err(io(format!("reading object {path}"), e)),
            };
            c.bytes += want;
            c.objs.insert(
                o,
                Entry {
                    data,
                    dirty: false,
                    used: uses,
                },
            );
            self.evict(c, o);
        }
        let e = c.objs.get_mut(&o).expect("just loaded");
        e.used = uses;
        Ok(e)
    }

    /// Drop the least recently used unchanged objects (never `keep`) while
    /// the cache holds more than its bound.
    fn evict(&self, c: &mut Cache, keep: Obj) {
        while c.bytes > self.cache_bytes {
            let victim = c
                .objs
                .iter()
                .filter(|(o, e)| !e.dirty && **o != keep)
                .min_by_key(|(_, e)| e.used)
                .map(|(o, _)| *o);
            let Some(v) = victim else { return };
            let e = c.objs.remove(&v).expect("a victim is cached");
            c.bytes -= e.data.len() as u64;
        }
    }

    /// Upload every changed object, all at once; returns when the store
    /// has all of them.
    fn upload_dirty(&self, c: &mut Cache) -> Result<()> {
        let jobs: Vec<_> = c
            .objs
            .iter()
            .filter(|(_, e)| e.dirty)
            .map(|(o, e)| {
                let (store, path) = (self.target.store.clone(), self.target.path(&o.name()));
                let body = PutPayload::from(e.data.clone());
                let h = self.rt.spawn(async move { store.put(&path, body).await });
                (*o, h)
            })
            .collect();
        let mut first_err = None;
        for (o, h) in jobs {
            let r = self.rt.block_on(h).map_err(|e| {
                Error::io(
                    format!("uploading {}", o.name()),
                    std::io::Error::other(e.to_string()),
                )
            });
            match r.and_then(|r| r.map_err(|e| io(format!("uploading object {}", o.name()), e))) {
                Ok(_) => {
                    let e = c.objs.get_mut(&o).expect("uploaded from the cache");
                    e.dirty = false;
                    c.dirty_bytes -= e.data.len() as u64;
                    self.ostats.puts.fetch_add(1, Ordering::Relaxed);
                    self.ostats
                        .put_bytes
                        .fetch_add(e.data.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn check(&self, offset: u64, len: usize, what: &str) -> Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.geo.device_bytes)
        {
            return Err(Error::invalid(format!(
                "{what} of {len} bytes at {offset}: past the end of the device ({} bytes)",
                self.geo.device_bytes
            )));
        }
        Ok(())
    }
}

fn read_geometry(t: &Target, rt: &Runtime) -> std::result::Result<Geometry, String> {
    let path = t.path("geometry.json");
    let bytes = match rt.block_on(async { t.store.get(&path).await?.bytes().await }) {
        Ok(b) => b,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(format!(
                "{}: no lsfs file system there ({path} does not exist; make one with lsfs mkfs)",
                t.url
            ))
        }
        Err(e) => return Err(format!("{}: reading {path}: {e}", t.url)),
    };
    let g: GeometryFile = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: {path} is damaged or not lsfs's: {e}", t.url))?;
    if g.format != FORMAT || g.block_bytes != crate::layout::BLOCK {
        return Err(format!(
            "{}: {path} describes layout {:?} with {}-byte blocks; this build reads {FORMAT:?} with 4096",
            t.url, g.format, g.block_bytes
        ));
    }
    g.geo
        .validate()
        .map_err(|e| format!("{}: {path}: {e}", t.url))?;
    Ok(g.geo)
}

/// Delete every object of the file system at `t` (mkfs --force).
fn delete_all(t: &Target, rt: &Runtime) -> std::result::Result<(), String> {
    for dir in [Some(t.path("seg")), Some(t.prefix.clone())] {
        let list = rt
            .block_on(t.store.list_with_delimiter(dir.as_ref()))
            .map_err(|e| format!("{}: listing objects: {e}", t.url))?;
        for o in list.objects {
            rt.block_on(t.store.delete(&o.location))
                .map_err(|e| format!("{}: deleting {}: {e}", t.url, o.location))?;
        }
    }
    Ok(())
}

impl BlockDevice for ObjectDevice {
    fn size_bytes(&self) -> u64 {
        self.geo.device_bytes
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len(), "read")?;
        let mut c = self.cache.lock().unwrap();
        let mut done = 0;
        for Piece { obj, at, len } in self.geo.pieces(offset, buf.len() as u64) {
            let e = self.load(&mut c, obj)?;
            let (at, len) = (at as usize, len as usize);
            buf[done..done + len].copy_from_slice(&e.data[at..at + len]);
            done += len;
        }
        self.stats.note_read(buf.len());
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.check(offset, buf.len(), "write")?;
        let mut c = self.cache.lock().unwrap();
        let mut done = 0;
        for Piece { obj, at, len } in self.geo.pieces(offset, buf.len() as u64) {
            let e = self.load(&mut c, obj)?;
            let (at, len) = (at as usize, len as usize);
            e.data[at..at + len].copy_from_slice(&buf[done..done + len]);
            let newly = !e.dirty;
            e.dirty = true;
            let size = e.data.len() as u64;
            if newly {
                c.dirty_bytes += size;
            }
            done += len;
        }
        self.stats.note_write(buf.len());
        if c.dirty_bytes * 2 > self.cache_bytes {
            self.upload_dirty(&mut c)?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut c = self.cache.lock().unwrap();
        self.upload_dirty(&mut c)?;
        self.stats.note_flush();
        Ok(())
    }

    /// A whole segment's object is deleted (its space in the store given
    /// back); anything else is not taken.
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        let Some(obj) = self.geo.whole_segment(offset, len) else {
            return Ok(0);
        };
        let mut c = self.cache.lock().unwrap();
        if let Some(e) = c.objs.remove(&obj) {
            c.bytes -= e.data.len() as u64;
            if e.dirty {
                c.dirty_bytes -= e.data.len() as u64;
            }
        }
        let path = self.target.path(&obj.name());
        match self.rt.block_on(self.target.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(io(format!("deleting object {path}"), e)),
        }
        self.ostats.deletes.fetch_add(1, Ordering::Relaxed);
        self.stats.note_discard(len);
        Ok(len)
    }

    fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// Requests to the store and their bytes (`lsfs stats`, `lsfs gc stats`).
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.object_counters();
        vec![
            ("gets", c.gets),
            ("get_bytes", c.get_bytes),
            ("puts", c.puts),
            ("put_bytes", c.put_bytes),
            ("deletes", c.deletes),
        ]
    }

    /// Give the lease back: the file system unmounted.
    fn release(&self) -> Result<()> {
        if self.leased.swap(false, Ordering::Relaxed) {
            lease::release(&self.target, &self.rt);
        }
        Ok(())
    }
}

impl Drop for ObjectDevice {
    /// A device dropped without an unmount (a failed mount, a test) gives
    /// the lease back too; only a process that dies keeps it.
    fn drop(&mut self) {
        let _ = BlockDevice::release(self);
    }
}
