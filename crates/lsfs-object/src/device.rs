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
//! whole (up to the segment size, 2 MiB by default, per fsync). So a mount
//! may choose a write-ahead file instead ([`WalConfig`], `wal.rs`): a
//! flush appends the ranges written since the last one to a local file
//! and fdatasyncs it, and the changed objects go up later, all of them at
//! once (`sync_all`): when the log starts a segment (the last one is
//! complete); when, with a superblock changed, a segment not changed since
//! the last upload, or a hole below the log's end, is written (the
//! checkpoint that freed those blocks must reach the store before their
//! new contents do); when changed objects would fill half the cache; when
//! the file passes its bound; and at unmount. Then the file restarts
//! empty. Segment objects go up before superblock objects, in either mode,
//! so that no reader or crash finds a superblock naming a checkpoint whose
//! segments are not stored; with the write-ahead file, deletes of
//! discarded segments wait for the next upload too. Opening with a file a
//! crash left replays its records into the objects and uploads them
//! before anything else. What each mode can lose is in docs/CRASH.md.
//!
//! A mount may also keep segment objects on local disk
//! ([`DiskCacheConfig`], `disk_cache.rs`), between the memory cache and
//! the store; a read-only one serves an entry only once the store has
//! said, to a GET conditional on the entry's ETag, that the object did not
//! change.
//!
//! Every request holds the device's lock, so reads and writes do not
//! overlap one another's round trips; the FUSE adapter still finishes
//! device work outside the engine's lock.
//!
//! Errors from the store (after the store's own retries with backoff,
//! bounded by `LSFS_OBJECT_RETRIES` and `LSFS_OBJECT_RETRY_SECS` for S3:
//! `target::retry_config`) are device errors: the engine fails the request
//! with EIO and turns the mount read-only, as for a disk.

use crate::disk_cache::{DiskCache, StoreMark};
use crate::layout::{Geometry, Obj, Piece, FORMAT};
use crate::lease;
use crate::target::Target;
use crate::wal::Wal;
use lsfs_core::device::{BlockDevice, DeviceStats};
use lsfs_core::error::{Error, Result};
use object_store::{PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::runtime::Runtime;

/// The object naming the last read-write open (a random id).
pub const WRITER: &str = "writer";

/// With records kept apart (a write-ahead file or the store's `log/N`),
/// the first flush this long after the oldest record not yet uploaded
/// uploads everything: readers on other machines see only uploaded
/// checkpoints, and a writer that fsyncs a little at a time would
/// otherwise keep them behind until its log starts a segment.
pub const UPLOAD_LAG: std::time::Duration = std::time::Duration::from_secs(30);

/// Segments a read-only open fetches ahead, at once, when it reads
/// segments in order: a large file read from start to end costs a round
/// trip per segment otherwise, one after the other.
pub const DEFAULT_READAHEAD_SEGMENTS: u64 = 4;

/// Default bound on the objects kept in memory (64 MiB: 32 segments of
/// the default 2 MiB).
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

/// A cache of segment objects on local disk (`disk_cache.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskCacheConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// A write-ahead file for a read-write open (`wal.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalConfig {
    pub place: WalPlace,
    /// Past this size a flush uploads every changed object and restarts
    /// the file (or deletes the records in the store).
    pub max_bytes: u64,
}

/// Where a flush's records wait until the objects they went into are
/// stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalPlace {
    /// A local file (`wal.rs`): an fsync costs an fdatasync on local disk,
    /// and a machine lost for good takes what it holds.
    File(PathBuf),
    /// The store itself, one small object per flush (`store_log.rs`): an
    /// fsync costs one PUT of what it covers, and nothing acknowledged
    /// depends on the machine.
    Store,
}

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
    /// GETs the store answered "not found" (the object reads as zeros);
    /// not in `gets`.
    pub get_misses: AtomicU64,
    /// Of the GETs and their bytes, those the cleaner's reads made
    /// (`lsfs_core::device::CleanerReads`).
    pub cleaner_gets: AtomicU64,
    pub cleaner_get_bytes: AtomicU64,
    /// Records appended to the write-ahead file, and their bytes.
    pub wal_records: AtomicU64,
    pub wal_bytes: AtomicU64,
    /// Uploads of every changed object that restarted the file.
    pub wal_syncs: AtomicU64,
    /// Of the GETs, those started ahead of a reader (`read_ahead`); a
    /// fetch ahead that is not finished when the reader moves elsewhere
    /// is dropped, and counted here only.
    pub readahead_gets: AtomicU64,
    /// A reader's entries on disk that a conditional GET found unchanged
    /// (served from disk; not in `gets`).
    pub disk_revalidated: AtomicU64,
}

impl ObjectStats {
    fn count_get(&self, bytes: u64) {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.get_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A copy of [`ObjectStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ObjectCounters {
    pub gets: u64,
    pub get_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub deletes: u64,
    pub get_misses: u64,
    pub cleaner_gets: u64,
    pub cleaner_get_bytes: u64,
    pub wal_records: u64,
    pub wal_bytes: u64,
    pub wal_syncs: u64,
    pub readahead_gets: u64,
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
    wal: Option<WalState>,
    disk: Option<DiskCache>,
    /// Segment objects being fetched ahead of a reader, by the store's
    /// runtime, and the segment the last miss fetched (read-only opens).
    ahead: HashMap<Obj, tokio::task::JoinHandle<object_store::Result<Fetched>>>,
    last_miss: Option<u64>,
    /// Objects a writable open knows the store does not hold (it deleted
    /// them, or a GET found none) and has not uploaded since: they read
    /// as zeros without a request. Without it the log paid a GET answered
    /// "not found" for every segment it started after the cleaner freed
    /// it. Only the lease holder writes, so what it knows stays true.
    absent: HashSet<Obj>,
}

/// An object's bytes as a GET returned them, and its ETag if the store
/// gave one.
type Fetched = (bytes::Bytes, Option<String>);

struct WalState {
    wal: Sink,
    max_bytes: u64,
    /// Device ranges written since the last flush (start to end, merged).
    ranges: BTreeMap<u64, u64>,
    /// How far into each segment object this mount wrote, at most: a
    /// write below it changes what the log wrote before, not its end.
    high: HashMap<Obj, u64>,
    /// Segments discarded since the last upload: their objects are deleted
    /// after it (the superblocks that freed them are stored by then), and
    /// read as zeros meanwhile.
    deletes: HashSet<Obj>,
    /// When the oldest record since the last upload was written: a flush
    /// [`UPLOAD_LAG`] later uploads, so that readers elsewhere, who see
    /// only what is uploaded, lag a trickle of fsyncs by that much.
    oldest_record: Option<std::time::Instant>,
}

/// Where [`WalState`]'s records go ([`WalPlace`]).
enum Sink {
    File(Wal),
    Store(crate::store_log::StoreLog),
}

impl Sink {
    /// Bytes of records since the last upload.
    fn len(&self) -> u64 {
        match self {
            Sink::File(f) => f.len(),
            Sink::Store(l) => l.len(),
        }
    }
}

impl WalState {
    fn note(&mut self, offset: u64, len: u64) {
        let (mut start, mut end) = (offset, offset + len);
        // Merge with every range that touches [start, end).
        let touching: Vec<(u64, u64)> = self
            .ranges
            .range(..=end)
            .rev()
            .take_while(|(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }
}

pub struct ObjectDevice {
    target: Target,
    geo: Geometry,
    rt: Runtime,
    cache: Mutex<Cache>,
    cache_bytes: u64,
    /// Holding the lease (a writable device until it is released).
    leased: AtomicBool,
    dead: Arc<AtomicBool>,
    /// The id this open wrote to the `writer` object (read-write opens).
    writer_id: AtomicU64,
    stats: DeviceStats,
    ostats: Arc<ObjectStats>,
    /// Opened read-only: the only opens that read ahead.
    read_only: bool,
    /// Segments fetched ahead of a reader going through them in order
    /// ([`ObjectDevice::set_readahead`]).
    readahead: AtomicU64,
    /// A read-only open's view, once mounted (`BlockDevice::fix_view`):
    /// the file system's id and the newest log record it found.
    view: Mutex<Option<(u64, u64)>>,
    /// A read-only open's cache on disk, whose entries are checked against
    /// their objects' ETags; shared with the opens of the same store that
    /// follow this one (`reopen_read_only`), which would otherwise find it
    /// locked.
    reader_disk: Option<Arc<Mutex<DiskCache>>>,
    /// [`UPLOAD_LAG`], or what [`ObjectDevice::set_upload_lag`] set, in ms.
    upload_lag_ms: AtomicU64,
}

fn io(what: String, e: object_store::Error) -> Error {
    Error::io(what, std::io::Error::other(e.to_string()))
}

pub(crate) fn runtime() -> std::result::Result<Runtime, String> {
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

    /// How many segments a read-only open fetches ahead when it reads
    /// segments in order ([`DEFAULT_READAHEAD_SEGMENTS`]; 0: none).
    pub fn set_readahead(&self, segments: u64) {
        self.readahead.store(segments, Ordering::Relaxed);
    }

    /// How long after the oldest record not uploaded a flush uploads
    /// everything ([`UPLOAD_LAG`] by default): shorter makes readers
    /// elsewhere lag less, at the cost of more segment uploads.
    pub fn set_upload_lag(&self, lag: std::time::Duration) {
        self.upload_lag_ms
            .store(lag.as_millis() as u64, Ordering::Relaxed);
    }

    /// Open the device at `t`; a writable one takes the lease (`lease.rs`).
    /// `cache_bytes` bounds the objects kept in memory.
    pub fn open(
        t: &Target,
        writable: bool,
        cache_bytes: u64,
    ) -> std::result::Result<ObjectDevice, String> {
        Self::open_with(t, writable, cache_bytes, None)
    }

    /// [`ObjectDevice::open`], read-write with the write-ahead file `wal`
    /// if given (a read-only open reads the store alone and ignores it).
    pub fn open_with(
        t: &Target,
        writable: bool,
        cache_bytes: u64,
        wal: Option<&WalConfig>,
    ) -> std::result::Result<ObjectDevice, String> {
        Self::open_full(t, writable, cache_bytes, wal, None)
    }

    /// [`ObjectDevice::open_with`], and with a cache of segment objects
    /// on local disk if `disk` is given.
    pub fn open_full(
        t: &Target,
        writable: bool,
        cache_bytes: u64,
        wal: Option<&WalConfig>,
        disk: Option<&DiskCacheConfig>,
    ) -> std::result::Result<ObjectDevice, String> {
        let reader_disk = match disk {
            Some(d) if !writable => Some(Arc::new(Mutex::new(DiskCache::open_for_readers(
                &d.dir,
                d.max_bytes,
                &t.url,
            )?))),
            _ => None,
        };
        Self::open_inner(t, writable, cache_bytes, wal, disk, reader_disk)
    }

    fn open_inner(
        t: &Target,
        writable: bool,
        cache_bytes: u64,
        wal: Option<&WalConfig>,
        disk: Option<&DiskCacheConfig>,
        reader_disk: Option<Arc<Mutex<DiskCache>>>,
    ) -> std::result::Result<ObjectDevice, String> {
        let rt = runtime()?;
        let geo = read_geometry(t, &rt)?;
        let wal = wal.filter(|_| writable);
        if writable && wal.is_none() {
            lease::acquire(t, &rt, &lease::Holder::me())?;
        }
        let dev = ObjectDevice {
            target: t.clone(),
            geo,
            rt,
            cache: Mutex::new(Cache::default()),
            cache_bytes: cache_bytes.max(4 * geo.segment_blocks * crate::layout::BLOCK),
            leased: AtomicBool::new(writable && wal.is_none()),
            dead: Arc::new(AtomicBool::new(false)),
            writer_id: AtomicU64::new(0),
            stats: DeviceStats::default(),
            ostats: Arc::new(ObjectStats::default()),
            read_only: !writable,
            readahead: AtomicU64::new(DEFAULT_READAHEAD_SEGMENTS),
            view: Mutex::new(None),
            reader_disk,
            upload_lag_ms: AtomicU64::new(UPLOAD_LAG.as_millis() as u64),
        };
        match wal.map(|w| &w.place) {
            Some(WalPlace::File(path)) => dev.open_wal(path, wal.expect("some").max_bytes)?,
            Some(WalPlace::Store) => {
                lease::acquire(t, &dev.rt, &lease::Holder::with_records_in_store())?;
                dev.leased.store(true, Ordering::Relaxed);
            }
            None => {}
        }
        if writable {
            // Records a store-log mount left are acknowledged writes,
            // whatever this mount keeps its own in.
            let high = dev.replay_store_log()?;
            if let Some(w) = wal.filter(|w| w.place == WalPlace::Store) {
                let mut c = dev.cache.lock().unwrap();
                let fs_id = dev.fs_id(&mut c).map_err(|e| format!("{}: {e}", t.url))?;
                c.wal = Some(WalState {
                    wal: Sink::Store(crate::store_log::StoreLog::new(fs_id, high)),
                    max_bytes: w.max_bytes,
                    ranges: BTreeMap::new(),
                    high: HashMap::new(),
                    deletes: HashSet::new(),
                    oldest_record: None,
                });
            }
            // Which writer opened last, for a disk cache to tell whether
            // another one may have changed objects since it closed.
            let before = dev.stamp_writer()?;
            if let Some(d) = disk {
                let mut c = dev.cache.lock().unwrap();
                let mut now = dev.mark(&mut c).map_err(|e| format!("{}: {e}", t.url))?;
                now.writer = before;
                c.disk = Some(DiskCache::open(&d.dir, d.max_bytes, &t.url, now)?);
            }
        }
        Ok(dev)
    }

    /// Replace the `writer` object with a new random id (this open's);
    /// returns the one it held (0 if none).
    fn stamp_writer(&self) -> std::result::Result<u64, String> {
        let path = self.target.path(WRITER);
        let before = match self
            .rt
            .block_on(async { self.target.store.get(&path).await?.bytes().await })
        {
            Ok(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0),
            Err(object_store::Error::NotFound { .. }) => 0,
            Err(e) => return Err(format!("{}: reading {path}: {e}", self.target.url)),
        };
        let id = crate::wal::random_id();
        self.rt
            .block_on(
                self.target
                    .store
                    .put(&path, PutPayload::from(format!("{id}\n").into_bytes())),
            )
            .map_err(|e| format!("{}: writing {path}: {e}", self.target.url))?;
        self.writer_id.store(id, Ordering::Relaxed);
        Ok(before)
    }

    /// Whether writes go through a write-ahead file.
    pub fn has_wal(&self) -> bool {
        self.cache.lock().unwrap().wal.is_some()
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
            get_misses: l(&s.get_misses),
            cleaner_gets: l(&s.cleaner_gets),
            cleaner_get_bytes: l(&s.cleaner_get_bytes),
            wal_records: l(&s.wal_records),
            wal_bytes: l(&s.wal_bytes),
            wal_syncs: l(&s.wal_syncs),
            readahead_gets: l(&s.readahead_gets),
        }
    }

    /// Object `o` in the cache, fetched if it is not (absent: zeros).
    fn load<'c>(&self, c: &'c mut Cache, o: Obj) -> Result<&'c mut Entry> {
        c.uses += 1;
        let uses = c.uses;
        if !c.objs.contains_key(&o) {
            let want = self.geo.obj_bytes(o);
            let path = self.target.path(&o.name());
            let discarded =
                c.wal.as_ref().is_some_and(|w| w.deletes.contains(&o)) || c.absent.contains(&o);
            let on_disk = match c.disk.as_mut() {
                Some(d) if !discarded && matches!(o, Obj::Segment(_)) => {
                    d.get(o, want).map(|(b, _)| b)
                }
                _ => None,
            };
            let got = if let Some(b) = on_disk {
                Ok(b.into())
            } else if let Some(rd) = self
                .reader_disk
                .as_ref()
                .filter(|_| matches!(o, Obj::Segment(_)))
            {
                self.fetch_for_reader(c, rd, o, &path, want)
            } else if discarded {
                Err(object_store::Error::NotFound {
                    path: path.to_string(),
                    source: "discarded".into(),
                })
            } else {
                let ahead = c.ahead.remove(&o);
                if let Obj::Segment(n) = o {
                    self.read_ahead(c, n);
                }
                let got = match ahead {
                    Some(h) => self.fetched_ahead(h),
                    None => self.get_object(&path),
                }
                .map(|(b, _)| b);
                if let Ok(b) = &got {
                    let n = b.len() as u64;
                    if lsfs_core::device::cleaner_is_reading() {
                        self.ostats.cleaner_gets.fetch_add(1, Ordering::Relaxed);
                        self.ostats
                            .cleaner_get_bytes
                            .fetch_add(n, Ordering::Relaxed);
                    }
                    if let Some(d) = c.disk.as_mut().filter(|_| n == want) {
                        d.put(o, b, "");
                    }
                } else if let Err(object_store::Error::NotFound { .. }) = &got {
                    self.ostats.get_misses.fetch_add(1, Ordering::Relaxed);
                    if self.leased.load(Ordering::Relaxed) {
                        c.absent.insert(o);
                    }
                }
                got
            };
            self.check_view(o, &path, &got)?;
            let data = match got {
                Ok(b) => {
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
            self.insert(c, o, data);
        }
        let e = c.objs.get_mut(&o).expect("just loaded");
        e.used = uses;
        Ok(e)
    }

    /// GET object `path`, counted, with its ETag.
    fn get_object(&self, path: &object_store::path::Path) -> object_store::Result<Fetched> {
        self.rt
            .block_on(async {
                let r = self.target.store.get(path).await?;
                let tag = r.meta.e_tag.clone();
                Ok((r.bytes().await?, tag))
            })
            .inspect(|(b, _)| self.ostats.count_get(b.len() as u64))
    }

    /// What a fetch ahead got (counted by its task).
    fn fetched_ahead(
        &self,
        h: tokio::task::JoinHandle<object_store::Result<Fetched>>,
    ) -> object_store::Result<Fetched> {
        match self.rt.block_on(h) {
            Ok(got) => got,
            Err(e) => Err(object_store::Error::Generic {
                store: "read-ahead",
                source: Box::new(e),
            }),
        }
    }

    /// Segment `o` for a read-only open with a cache on disk (`rd`): the
    /// entry there if the store says, to a GET conditional on the entry's
    /// ETag, that the object is unchanged (counted in
    /// `disk_cache_revalidated`, not in `gets`); else the object as the
    /// GET (or a fetch ahead) returned it, kept on disk with its ETag.
    fn fetch_for_reader(
        &self,
        c: &mut Cache,
        rd: &Mutex<DiskCache>,
        o: Obj,
        path: &object_store::path::Path,
        want: u64,
    ) -> object_store::Result<bytes::Bytes> {
        let ahead = c.ahead.remove(&o);
        if let Obj::Segment(n) = o {
            self.read_ahead(c, n);
        }
        // A fetch already under way brings the object whole: the entry on
        // disk is then not read.
        let held = match ahead {
            Some(_) => None,
            None => rd
                .lock()
                .unwrap()
                .get(o, want)
                .filter(|(_, tag)| !tag.is_empty()),
        };
        let got = match (held, ahead) {
            (_, Some(h)) => self.fetched_ahead(h),
            (Some((data, tag)), None) => {
                let opts = object_store::GetOptions {
                    if_none_match: Some(tag),
                    ..Default::default()
                };
                let r = self.rt.block_on(async {
                    let r = self.target.store.get_opts(path, opts).await?;
                    let tag = r.meta.e_tag.clone();
                    Ok((r.bytes().await?, tag))
                });
                match r {
                    Err(object_store::Error::NotModified { .. }) => {
                        self.ostats.disk_revalidated.fetch_add(1, Ordering::Relaxed);
                        return Ok(data.into());
                    }
                    r => {
                        rd.lock().unwrap().stale(o);
                        r.inspect(|(b, _)| self.ostats.count_get(b.len() as u64))
                    }
                }
            }
            (None, None) => self.get_object(path),
        };
        match got {
            Ok((b, tag)) => {
                if let Some(tag) = tag.filter(|_| b.len() as u64 == want) {
                    rd.lock().unwrap().put(o, &b, &tag);
                }
                Ok(b)
            }
            Err(e) => {
                if matches!(e, object_store::Error::NotFound { .. }) {
                    self.ostats.get_misses.fetch_add(1, Ordering::Relaxed);
                    rd.lock().unwrap().remove(o);
                }
                Err(e)
            }
        }
    }

    /// For a read-only open with its view fixed: refuse segment `o`, just
    /// fetched as `got`, if the writer has reused it since that view (its
    /// first record is newer than the newest the view found) or freed it
    /// (its object deleted). Once the view's checkpoint is given up (the
    /// writer keeps plain checkpoints for `protection_secs` at most, less
    /// when space runs short), its cleaner may move the blocks this view
    /// reads and write the segment again; without this check the reader
    /// would read the new blocks, or zeros, as its own. Threaded logging,
    /// which writes into a segment's holes without a new first record,
    /// would not be detected: it is refused on an object store
    /// (`fills_holes`).
    fn check_view<B: AsRef<[u8]>>(
        &self,
        o: Obj,
        path: &object_store::path::Path,
        got: &std::result::Result<B, object_store::Error>,
    ) -> Result<()> {
        let Obj::Segment(n) = o else { return Ok(()) };
        let Some((fs_id, seq)) = *self.view.lock().unwrap() else {
            return Ok(());
        };
        let stale = |why: String| {
            Err(Error::io(
                format!("segment {n} (object {path})"),
                std::io::Error::other(format!(
                    "{why} after the checkpoint this read-only mount shows, which the writer \
                     has since given up; unmount and mount again to see a newer checkpoint \
                     (snapshots are never given up)"
                )),
            ))
        };
        match got {
            Err(object_store::Error::NotFound { .. }) => {
                stale("the writer freed this segment".into())
            }
            Ok(b) => {
                let b = b.as_ref();
                let first = &b[..b.len().min(crate::layout::BLOCK as usize)];
                use lsfs_core::log::record::RecordHeader;
                match RecordHeader::peek(first, fs_id) {
                    Some((_, s, _, _)) if s > seq => stale(format!(
                        "the writer wrote this segment again (record {s}; this mount saw up \
                         to record {seq})"
                    )),
                    None => match RecordHeader::peek_fs_id(first) {
                        Some(other) if other != fs_id => stale(format!(
                            "file system {other:#x}, not this mount's {fs_id:#x}, wrote this \
                             segment (the store was made again)"
                        )),
                        _ => Ok(()),
                    },
                    _ => Ok(()),
                }
            }
            Err(_) => Ok(()),
        }
    }

    /// A read-only open that just missed segment `n` right after `n − 1`:
    /// start fetching the next segments that are neither cached nor on
    /// their way, and stop fetching those behind `n`. The fetches run on
    /// the store's runtime; a later miss of one of them waits for it
    /// (`load`), and it is checked there as any fetched object is.
    fn read_ahead(&self, c: &mut Cache, n: u64) {
        let k = self.readahead.load(Ordering::Relaxed);
        if !self.read_only || k == 0 {
            return;
        }
        let in_order = c.last_miss.is_some_and(|m| m + 1 == n);
        c.last_miss = Some(n);
        c.ahead.retain(|o, h| {
            let keep = !matches!(o, Obj::Segment(s) if *s < n);
            if !keep {
                h.abort();
            }
            keep
        });
        if !in_order {
            return;
        }
        for s in n + 1..(n + 1 + k).min(self.geo.nsegments()) {
            let o = Obj::Segment(s);
            if c.objs.contains_key(&o) || c.ahead.contains_key(&o) {
                continue;
            }
            // Checked with a GET of no bytes when it is needed instead.
            if self
                .reader_disk
                .as_ref()
                .is_some_and(|d| d.lock().unwrap().holds(o))
            {
                continue;
            }
            let (store, path, stats) = (
                self.target.store.clone(),
                self.target.path(&o.name()),
                self.ostats.clone(),
            );
            let h = self.rt.spawn(async move {
                let r = store.get(&path).await?;
                let tag = r.meta.e_tag.clone();
                let b = r.bytes().await?;
                stats.count_get(b.len() as u64);
                Ok((b, tag))
            });
            self.ostats.readahead_gets.fetch_add(1, Ordering::Relaxed);
            c.ahead.insert(o, h);
        }
    }

    /// Cache `data` as object `o` (not cached yet), unchanged; evict
    /// others beyond the bound.
    fn insert<'c>(&self, c: &'c mut Cache, o: Obj, data: Vec<u8>) -> &'c mut Entry {
        if let Some(h) = c.ahead.remove(&o) {
            h.abort();
        }
        c.uses += 1;
        c.bytes += data.len() as u64;
        c.objs.insert(
            o,
            Entry {
                data,
                dirty: false,
                used: c.uses,
            },
        );
        self.evict(c, o);
        c.objs.get_mut(&o).expect("just inserted")
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

    /// Upload every changed object: the segments (and the tail) all at
    /// once, then the superblocks, so that a superblock never reaches the
    /// store before the segments its checkpoint needs. Returns when the
    /// store has all of them.
    fn upload_dirty(&self, c: &mut Cache) -> Result<()> {
        self.upload_where(c, |o| !is_super(o))?;
        self.upload_where(c, is_super)
    }

    /// Upload the changed objects `which` picks, all at once.
    fn upload_where(&self, c: &mut Cache, which: fn(Obj) -> bool) -> Result<()> {
        let jobs: Vec<_> = c
            .objs
            .iter()
            .filter(|(o, e)| e.dirty && which(**o))
            .map(|(o, e)| {
                // Gone from the disk cache while the store's object changes.
                if let Some(d) = c.disk.as_mut() {
                    d.remove(*o);
                }
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
                    if let Some(d) = c.disk.as_mut() {
                        d.put(o, &e.data, "");
                    }
                    c.absent.remove(&o);
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

    /// Store everything (write-ahead mode): upload every changed object
    /// (segments, then superblocks), delete the discarded segments' objects,
    /// and restart the write-ahead file, whose records the store now holds.
    fn sync_all(&self, c: &mut Cache) -> Result<()> {
        self.upload_dirty(c)?;
        let Some(w) = c.wal.as_mut() else {
            return Ok(());
        };
        let mut deletes: Vec<Obj> = w.deletes.iter().copied().collect();
        deletes.sort();
        for o in deletes {
            let path = self.target.path(&o.name());
            match self.rt.block_on(self.target.store.delete(&path)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io(format!("deleting object {path}"), e)),
            }
            self.ostats.deletes.fetch_add(1, Ordering::Relaxed);
            c.wal
                .as_mut()
                .expect("in write-ahead mode")
                .deletes
                .remove(&o);
            c.absent.insert(o);
        }
        let fs_id = self.fs_id(c)?;
        let w = c.wal.as_mut().expect("in write-ahead mode");
        w.ranges.clear();
        w.oldest_record = None;
        match &mut w.wal {
            Sink::File(f) => f.restart(&self.target.url, fs_id).map_err(|e| {
                Error::io(
                    format!("restarting the write-ahead file {}", f.path.display()),
                    e,
                )
            })?,
            Sink::Store(l) => {
                let n = l
                    .restart(&self.target, &self.rt, fs_id)
                    .map_err(|e| Error::io(self.target.url.clone(), std::io::Error::other(e)))?;
                self.ostats.deletes.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.ostats.wal_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The file system's id, from the newer superblock copy that decodes
    /// (0 if none does: nothing made here yet).
    fn fs_id(&self, c: &mut Cache) -> Result<u64> {
        Ok(self.mark(c)?.fs_id)
    }

    /// The file system's id and the newest superblock's sequence number
    /// (0 and 0 if no copy decodes).
    fn mark(&self, c: &mut Cache) -> Result<StoreMark> {
        let mut best: Option<(u64, u64)> = None;
        for o in [Obj::SuperA, Obj::SuperB] {
            let e = self.load(c, o)?;
            if let Ok(sb) = lsfs_core::log::superblock::Superblock::decode(
                &e.data,
                &o.name(),
                self.geo.device_bytes,
            ) {
                if best.is_none_or(|(seq, _)| sb.sb_seq > seq) {
                    best = Some((sb.sb_seq, sb.fs_id));
                }
            }
        }
        let (sb_seq, fs_id) = best.unwrap_or((0, 0));
        Ok(StoreMark {
            fs_id,
            sb_seq,
            writer: 0,
        })
    }

    /// Whether a write of `pieces` must wait for everything changed so far
    /// to be stored (write-ahead mode): it starts a segment (the log moved
    /// on) while other objects are changed; or, while a superblock is
    /// changed, it changes a segment not changed since the last upload, or
    /// a segment below where this mount's writes into it reached (a hole
    /// filled, not the log's end). The latter two keep blocks that a
    /// checkpoint freed from being stored with new contents before that
    /// checkpoint's superblock is: the store's own superblock may still
    /// need the old ones. Appends at the log's end need no such wait: no
    /// checkpoint needs what lies past it.
    fn must_sync_before(&self, c: &Cache, pieces: &[Piece]) -> bool {
        let changed = |o: Obj| c.objs.get(&o).is_some_and(|e| e.dirty);
        let super_changed = changed(Obj::SuperA) || changed(Obj::SuperB);
        let high = |o: Obj| {
            c.wal
                .as_ref()
                .and_then(|w| w.high.get(&o).copied())
                .unwrap_or(0)
        };
        pieces.iter().any(|p| {
            matches!(p.obj, Obj::Segment(_))
                && if changed(p.obj) {
                    super_changed && p.at < high(p.obj)
                } else {
                    super_changed || (p.at == 0 && c.dirty_bytes > 0)
                }
        })
    }

    /// The bytes of `[offset, offset + len)` as the cache has them.
    fn cached(&self, c: &mut Cache, offset: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        for Piece { obj, at, len } in self.geo.pieces(offset, len) {
            let e = self.load(c, obj)?;
            out.extend_from_slice(&e.data[at as usize..(at + len) as usize]);
        }
        Ok(out)
    }

    /// Replay the flush records a mount that kept them in the store left
    /// there (`store_log.rs`): apply them in order, upload every changed
    /// object, then delete them oldest first. Returns the highest record
    /// number found (0 if none), after which new records start.
    fn replay_store_log(&self) -> std::result::Result<u64, String> {
        let mut c = self.cache.lock().unwrap();
        let url = &self.target.url;
        let (records, high) = crate::store_log::find(&self.target, &self.rt, || {
            self.fs_id(&mut c).map_err(|e| format!("{url}: {e}"))
        })?;
        if records.is_empty() {
            return Ok(high);
        }
        let r = (|| {
            for rec in &records {
                for (off, bytes) in &rec.ranges {
                    self.check(*off, bytes.len(), "replayed write")?;
                    self.apply(&mut c, *off, bytes)?;
                }
            }
            self.upload_dirty(&mut c)
        })();
        r.map_err(|e| format!("{url}: replaying the flush records in the store: {e}"))?;
        for rec in &records {
            crate::store_log::delete(&self.target, &self.rt, rec.seq)?;
        }
        tracing::info!(
            "{url}: stored {} flushes a mount left as records in the store",
            records.len()
        );
        Ok(high)
    }

    /// Open with the write-ahead file `w`: check that it is this file
    /// system's, take the lease, replay what a crash left in it, and
    /// restart it.
    fn open_wal(&self, path: &std::path::Path, max_bytes: u64) -> std::result::Result<(), String> {
        let p = path.display();
        let (wal, found) = Wal::open(path)?;
        let mut c = self.cache.lock().unwrap();
        let fs_id = self
            .fs_id(&mut c)
            .map_err(|e| format!("{}: {e}", self.target.url))?;
        if let Some(h) = &found.header {
            let other_url = !h.url.is_empty()
                && h.url.trim_end_matches('/') != self.target.url.trim_end_matches('/');
            let other_fs = h.fs_id != 0 && h.fs_id != fs_id;
            if found.records.is_empty() {
                // Holding nothing, it has nothing to lose: taken over (a
                // file system made again at the same URL, say).
                if other_url || other_fs {
                    tracing::info!(
                        "object_wal {p}: empty, last used for {} (file system id {:#x}); \
                         taken over for {}",
                        h.url,
                        h.fs_id,
                        self.target.url
                    );
                }
            } else if other_url {
                return Err(format!(
                    "object_wal {p} holds {} flushes of the file system at {}, not {}; \
                     give each file system its own write-ahead file",
                    found.records.len(),
                    h.url,
                    self.target.url
                ));
            } else if other_fs {
                return Err(format!(
                    "object_wal {p} holds {} flushes of file system id {:#x}, but {} holds file \
                     system id {fs_id:#x} (made again since?); they cannot be replayed there. \
                     To give them up, delete {p}",
                    found.records.len(),
                    h.fs_id,
                    self.target.url
                ));
            }
        }
        let me = lease::Holder::with_wal(path, wal.header.id);
        if !found.records.is_empty() {
            // Replaying over a store someone else wrote since would undo
            // their writes: only the lease this file's mount left proves
            // that nobody did.
            let held = lease::holder(&self.target, &self.rt)?;
            if held.as_ref().and_then(|h| h.wal_id) != Some(wal.header.id) {
                return Err(format!(
                    "object_wal {p} holds {} flushes not yet in the store, but the store's lease \
                     is not the one this file's mount left ({}): the file system may have been \
                     written since, and replaying would undo that. To give those flushes up, \
                     delete {p}",
                    found.records.len(),
                    held.map_or("there is none".into(), |h| format!(
                        "host {} pid {}",
                        h.host, h.pid
                    ))
                ));
            }
        }
        lease::acquire(&self.target, &self.rt, &me)?;
        self.leased.store(true, Ordering::Relaxed);
        if found.torn_bytes > 0 {
            tracing::warn!(
                "object_wal {p}: ignoring {} bytes after its last whole record (a flush that \
                 never returned)",
                found.torn_bytes
            );
        }
        let replayed = found.records.len();
        c.wal = Some(WalState {
            wal: Sink::File(wal),
            max_bytes,
            ranges: BTreeMap::new(),
            high: HashMap::new(),
            deletes: HashSet::new(),
            oldest_record: None,
        });
        let r = (|| {
            for rec in &found.records {
                for (off, bytes) in &rec.ranges {
                    self.check(*off, bytes.len(), "replayed write")?;
                    self.apply(&mut c, *off, bytes)?;
                }
            }
            self.sync_all(&mut c)
        })();
        r.map_err(|e| format!("object_wal {p}: replaying it into {}: {e}", self.target.url))?;
        if replayed > 0 {
            tracing::info!("object_wal {p}: stored {replayed} flushes a crash left in it");
        }
        Ok(())
    }

    /// Change the cached objects (the write itself, without the rules of
    /// when to upload).
    fn apply(&self, c: &mut Cache, offset: u64, buf: &[u8]) -> Result<()> {
        let mut done = 0;
        for Piece { obj, at, len } in self.geo.pieces(offset, buf.len() as u64) {
            let (at, len) = (at as usize, len as usize);
            let e =
                if at == 0 && len as u64 == self.geo.obj_bytes(obj) && !c.objs.contains_key(&obj) {
                    // Replaced whole: what the store holds does not matter, and
                    // fetching it would cost a GET of the object for nothing
                    // (`lsfs migrate` writes every segment so).
                    self.insert(c, obj, buf[done..done + len].to_vec())
                } else {
                    let e = self.load(c, obj)?;
                    e.data[at..at + len].copy_from_slice(&buf[done..done + len]);
                    e
                };
            let newly = !e.dirty;
            e.dirty = true;
            let size = e.data.len() as u64;
            if newly {
                c.dirty_bytes += size;
            }
            if let Some(w) = c.wal.as_mut() {
                // Written again: stored by the next upload, not deleted.
                w.deletes.remove(&obj);
            }
            done += len;
        }
        Ok(())
    }

    /// A switch that makes the device behave as if its process died: once
    /// set, every request fails, nothing more is uploaded or appended, the
    /// lease stays, and dropping the device closes the write-ahead file as
    /// it is. For tests of what a crash leaves.
    pub fn kill_switch(&self) -> Arc<AtomicBool> {
        self.dead.clone()
    }

    /// The request counters, shared: they go on counting after the device
    /// is handed to the file system.
    pub fn stats_handle(&self) -> Arc<ObjectStats> {
        self.ostats.clone()
    }

    fn alive(&self) -> Result<()> {
        if self.dead.load(Ordering::Relaxed) {
            return Err(Error::io(
                "object store device".to_string(),
                std::io::Error::other("stopped by its kill switch"),
            ));
        }
        Ok(())
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

fn is_super(o: Obj) -> bool {
    matches!(o, Obj::SuperA | Obj::SuperB)
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
    for dir in [
        Some(t.path("seg")),
        Some(t.path(crate::store_log::DIR)),
        // Holds on the old file system's checkpoints, and
        // `readers-promoted` (below, in the prefix), which would name
        // the new one's checkpoints as made for holds.
        Some(t.path(crate::readers::DIR)),
        Some(t.prefix.clone()),
    ] {
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

    /// Never: see `BlockDevice::fills_holes`.
    fn fills_holes(&self) -> bool {
        false
    }

    /// Read-only opens only: a writable one is the writer.
    fn fix_view(&self, fs_id: u64, seq: u64) {
        if !self.leased.load(Ordering::Relaxed) {
            *self.view.lock().unwrap() = Some((fs_id, seq));
        }
    }

    /// Read-only opens with a fixed view only: a new open of the same
    /// store, whose cache starts empty (what this one holds may be segments
    /// the writer has since written again).
    fn reopen_read_only(&self) -> Option<Result<Box<dyn BlockDevice>>> {
        self.view.lock().unwrap().as_ref()?;
        Some(
            ObjectDevice::open_inner(
                &self.target,
                false,
                self.cache_bytes,
                None,
                None,
                self.reader_disk.clone(),
            )
            .map(|d| Box::new(d) as Box<dyn BlockDevice>)
            .map_err(|e| {
                Error::io(
                    format!("opening {} again", self.target.url),
                    std::io::Error::other(e),
                )
            }),
        )
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.alive()?;
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
        self.alive()?;
        self.check(offset, buf.len(), "write")?;
        let mut c = self.cache.lock().unwrap();
        if c.wal.is_some() && self.must_sync_before(&c, &self.geo.pieces(offset, buf.len() as u64))
        {
            self.sync_all(&mut c)?;
        }
        self.apply(&mut c, offset, buf)?;
        if let Some(w) = c.wal.as_mut() {
            w.note(offset, buf.len() as u64);
            for p in self.geo.pieces(offset, buf.len() as u64) {
                let h = w.high.entry(p.obj).or_insert(0);
                *h = (*h).max(p.at + p.len);
            }
        }
        self.stats.note_write(buf.len());
        if c.dirty_bytes * 2 > self.cache_bytes {
            if c.wal.is_some() {
                self.sync_all(&mut c)?;
            } else {
                self.upload_dirty(&mut c)?;
            }
        }
        Ok(())
    }

    /// Always: readers elsewhere see what is uploaded.
    fn publishes(&self) -> bool {
        true
    }

    /// Upload every changed object, also with records kept apart (whose
    /// log then restarts): a snapshot or checkpoint someone asked for is
    /// then in the store for readers to mount.
    fn publish(&self) -> Result<()> {
        self.alive()?;
        let mut c = self.cache.lock().unwrap();
        if c.wal.is_some() {
            self.sync_all(&mut c)?;
        } else {
            self.upload_dirty(&mut c)?;
        }
        self.stats.note_flush();
        Ok(())
    }

    /// Without a write-ahead file: upload every changed object. With one:
    /// append the ranges written since the last flush to it and fdatasync
    /// it; upload everything if it passed its bound.
    fn flush(&self) -> Result<()> {
        self.alive()?;
        let mut c = self.cache.lock().unwrap();
        let Some(w) = c.wal.as_mut() else {
            self.upload_dirty(&mut c)?;
            self.stats.note_flush();
            return Ok(());
        };
        let ranges = std::mem::take(&mut w.ranges);
        if !ranges.is_empty() {
            let mut rec = Vec::with_capacity(ranges.len());
            for (start, end) in ranges {
                rec.push((start, self.cached(&mut c, start, end - start)?));
            }
            let w = c.wal.as_mut().expect("in write-ahead mode");
            let n = match &mut w.wal {
                Sink::File(f) => f.append(&rec).map_err(|e| {
                    Error::io(
                        format!("appending to the write-ahead file {}", f.path.display()),
                        e,
                    )
                })?,
                Sink::Store(l) => {
                    let stored = l.append(&self.target, &self.rt, &rec);
                    let n = match stored {
                        Ok(n) => n,
                        Err(e) => {
                            // Not acknowledged, but still to be covered by
                            // the next flush that succeeds.
                            for (start, b) in &rec {
                                w.note(*start, b.len() as u64);
                            }
                            return Err(Error::io(
                                self.target.url.clone(),
                                std::io::Error::other(e),
                            ));
                        }
                    };
                    self.ostats.puts.fetch_add(1, Ordering::Relaxed);
                    self.ostats.put_bytes.fetch_add(n, Ordering::Relaxed);
                    n
                }
            };
            self.ostats.wal_records.fetch_add(1, Ordering::Relaxed);
            self.ostats.wal_bytes.fetch_add(n, Ordering::Relaxed);
            let oldest = *w.oldest_record.get_or_insert_with(std::time::Instant::now);
            let lag = std::time::Duration::from_millis(self.upload_lag_ms.load(Ordering::Relaxed));
            if w.wal.len() > w.max_bytes || oldest.elapsed() >= lag {
                self.sync_all(&mut c)?;
            }
        }
        self.stats.note_flush();
        Ok(())
    }

    /// The objects of the segments the range covers whole are deleted
    /// (their space in the store given back); anything else is not taken.
    /// Adjacent freed segments come as one range.
    fn discard(&self, offset: u64, len: u64) -> Result<u64> {
        self.alive()?;
        self.check(offset, len as usize, "discard")?;
        let objs = self.geo.whole_segments(offset, len);
        let mut c = self.cache.lock().unwrap();
        let mut taken = 0;
        for obj in objs {
            let bytes = self.geo.obj_bytes(obj);
            if let Some(e) = c.objs.remove(&obj) {
                c.bytes -= e.data.len() as u64;
                if e.dirty {
                    c.dirty_bytes -= e.data.len() as u64;
                }
            }
            if let Some(d) = c.disk.as_mut() {
                d.remove(obj);
            }
            if let Some(w) = c.wal.as_mut() {
                // The superblock that freed the segment may not be stored
                // yet: the store's own may still need the object.
                w.deletes.insert(obj);
                // Written again, it is written from its start.
                w.high.remove(&obj);
            } else {
                let path = self.target.path(&obj.name());
                match self.rt.block_on(self.target.store.delete(&path)) {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(io(format!("deleting object {path}"), e)),
                }
                self.ostats.deletes.fetch_add(1, Ordering::Relaxed);
                c.absent.insert(obj);
            }
            taken += bytes;
        }
        if taken > 0 {
            self.stats.note_discard(taken);
        }
        Ok(taken)
    }

    /// Without reading: whether every object the range touches is in the
    /// memory cache or the disk cache (or reads as zeros, known absent or
    /// discarded and not yet deleted), so that reading it costs no GET.
    fn is_cached(&self, offset: u64, len: u64) -> Option<bool> {
        if self.check(offset, len as usize, "read").is_err() {
            return Some(false);
        }
        let c = self.cache.lock().unwrap();
        let held = |o: Obj| {
            c.objs.contains_key(&o)
                || (matches!(o, Obj::Segment(_)) && c.disk.as_ref().is_some_and(|d| d.holds(o)))
                || c.wal.as_ref().is_some_and(|w| w.deletes.contains(&o))
                || c.absent.contains(&o)
        };
        Some(self.geo.pieces(offset, len).iter().all(|p| held(p.obj)))
    }

    fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// Requests to the store and their bytes (`lsfs stats`, `lsfs gc stats`).
    fn extra_counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.object_counters();
        let mut v = vec![
            ("gets", c.gets),
            ("get_bytes", c.get_bytes),
            ("puts", c.puts),
            ("put_bytes", c.put_bytes),
            ("deletes", c.deletes),
            ("get_misses", c.get_misses),
            ("cleaner_gets", c.cleaner_gets),
            ("cleaner_get_bytes", c.cleaner_get_bytes),
        ];
        if self.read_only {
            v.push(("readahead_gets", c.readahead_gets));
        }
        if let Some(d) = self.cache.lock().unwrap().disk.as_ref() {
            v.extend([
                ("disk_cache_hits", d.hits),
                ("disk_cache_misses", d.misses),
                ("disk_cache_bytes", d.bytes()),
            ]);
        }
        if let Some(d) = self.reader_disk.as_ref() {
            let d = d.lock().unwrap();
            v.extend([
                ("disk_cache_hits", d.hits),
                ("disk_cache_misses", d.misses),
                ("disk_cache_bytes", d.bytes()),
                (
                    "disk_cache_revalidated",
                    self.ostats.disk_revalidated.load(Ordering::Relaxed),
                ),
            ]);
        }
        if self.has_wal() {
            v.extend([
                ("wal_records", c.wal_records),
                ("wal_bytes", c.wal_bytes),
                ("wal_syncs", c.wal_syncs),
            ]);
        }
        v
    }

    /// Give the lease back: the file system unmounted. With a write-ahead
    /// file, everything is stored first; if that fails the lease is kept,
    /// since the file still holds acknowledged writes and only a mount
    /// with it may go on (`lease.rs`).
    fn release(&self) -> Result<()> {
        if self.read_only {
            // Nothing to give back but memory. A reader that follows its
            // writer opens the store again and lets this open go, while
            // the FUSE side may keep a handle on it until the unmount.
            let mut c = self.cache.lock().unwrap();
            for (_, h) in c.ahead.drain() {
                h.abort();
            }
            c.objs.clear();
            c.bytes = 0;
            return Ok(());
        }
        if self.dead.load(Ordering::Relaxed) || !self.leased.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let mut c = self.cache.lock().unwrap();
        if c.wal.is_some() {
            if let Err(e) = self.sync_all(&mut c) {
                // Kept, and tried again at the next release (or the drop).
                self.leased.store(true, Ordering::Relaxed);
                tracing::error!(
                    "{}: storing what the write-ahead file (or the records in the store) \
                     holds failed; the lease is kept for the next mount, which stores it: {e}",
                    self.target.url
                );
                return Err(e);
            }
        }
        // Everything stored: the disk cache matches the store as it is now.
        if c.dirty_bytes == 0 && c.disk.is_some() {
            let mut mark = self.mark(&mut c)?;
            mark.writer = self.writer_id.load(Ordering::Relaxed);
            if let Err(e) = c.disk.as_ref().expect("checked").close(mark) {
                tracing::warn!("{e}");
            }
        }
        drop(c);
        lease::release(&self.target, &self.rt);
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
