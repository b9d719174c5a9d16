//! Write streams: separate open segments for hot user data, cold user data,
//! cleaner output and metadata, so that blocks that die at different rates
//! stop sharing segments (docs/DESIGN.md §4.6, Rohner §4, Janda).
//!
//! The metadata stream is the log proper: it holds metadata, fsync records
//! and every checkpoint's super root, and it is the chain recovery follows.
//! The three data streams are written only as part of a checkpoint, before
//! its super root and under the same flush; the DAT points at their blocks,
//! so recovery never needs to find them. Each keeps one open segment
//! (reserved, like the log's current and next segments); after a remount or
//! a crash each reopens its most recently written partly filled segment,
//! at the end the SUFILE counts (`Store::resume_stream_heads`).
//!
//! **Temperature signal** (the same classifier the simulator runs,
//! `lsfs_policy::gc::TemperatureClassifier`): time is counted in user
//! blocks written. A file rewritten sooner than the mean rewrite interval of
//! the data set (live blocks: at that write rate every live block is
//! rewritten once per that many writes) is hot; a file written for the
//! first time, or seen too long ago, is cold. A block the cleaner moves is
//! hot if its own last user write lies within that interval, else it goes to
//! the cleaner stream. Its age comes from its DAT entry's first checkpoint
//! (moves keep it), converted to the clock by the checkpoints and user
//! blocks counted since mount. (The age of the victim segment, used before,
//! made cold blocks that the cleaner had once moved into a young segment
//! look hot for ever: measured on 90/10 hot/cold, 40,000 of 49,000 live
//! blocks ended up in the hot stream.) The per-file history is kept in memory, bounded by
//! [`FILE_HISTORY_MAX`] files; a file outside it counts as new (cold).
//!
//! Streams are on by default on file systems of at least
//! [`STREAMS_MIN_SEGMENTS`] segments: each stream holds a segment open,
//! which a tiny image cannot spare.

use crate::cache::Owner;
use crate::layout::FIRST_USER_INO;
use crate::log::record::BlockKind;
use crate::meta::store::Store;
use lsfs_policy::gc::{Temperature, TemperatureClassifier};

/// Below this many segments, everything goes to the metadata stream.
pub const STREAMS_MIN_SEGMENTS: u64 = 64;
/// Files whose last write time is remembered (16 bytes each: 4 MiB).
pub const FILE_HISTORY_MAX: usize = 1 << 18;

/// Where a block is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// The log proper: metadata, fsync records, super roots.
    Meta = 0,
    HotUser = 1,
    ColdUser = 2,
    /// Live blocks the cleaner moved that are not hot.
    Cleaner = 3,
}

impl Stream {
    pub const ALL: [Stream; 4] = [
        Stream::Meta,
        Stream::HotUser,
        Stream::ColdUser,
        Stream::Cleaner,
    ];
    /// The data streams, which have heads of their own.
    pub const DATA: [Stream; 3] = [Stream::HotUser, Stream::ColdUser, Stream::Cleaner];

    pub fn name(self) -> &'static str {
        match self {
            Stream::Meta => "meta",
            Stream::HotUser => "hot",
            Stream::ColdUser => "cold",
            Stream::Cleaner => "cleaner",
        }
    }

    /// The class a selection policy sees for segments of this stream.
    pub fn temperature(self) -> Temperature {
        match self {
            Stream::Meta => Temperature::Mixed,
            Stream::HotUser => Temperature::Hot,
            Stream::ColdUser | Stream::Cleaner => Temperature::Cold,
        }
    }

    /// Stored in bits 8..10 of a SUFILE entry's flags (FORMAT.md §SUFILE).
    pub fn from_flags(flags: u32) -> Stream {
        match (flags >> STREAM_SHIFT) & 3 {
            1 => Stream::HotUser,
            2 => Stream::ColdUser,
            3 => Stream::Cleaner,
            _ => Stream::Meta,
        }
    }

    pub fn flags(self) -> u32 {
        (self as u32) << STREAM_SHIFT
    }
}

pub(crate) const STREAM_SHIFT: u32 = 8;
pub(crate) const STREAM_MASK: u32 = 3 << STREAM_SHIFT;

/// The open segment of a data stream and how much of it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHead {
    pub seg: u64,
    pub off: u32,
}

/// Stream state kept by the store (in memory only; see the module docs).
#[derive(Default, Debug)]
pub struct Streams {
    pub enabled: bool,
    /// In use for the checkpoint being built: enabled, and free space is
    /// not so short that open segments would be wasted (decided once per
    /// checkpoint, so every plan of it agrees).
    pub active: bool,
    /// Open segments of the data streams, indexed by `Stream as usize - 1`.
    pub heads: [Option<DataHead>; 3],
    /// User data blocks written since mount: the classifier's clock.
    pub clock: u64,
    /// `(clock, checkpoint being built)` at this mount's first user write:
    /// the exchange rate between checkpoint numbers and the clock.
    cno_base: Option<(u64, u64)>,
    /// Clock of each file's last write.
    file_last_write: std::collections::HashMap<u64, u64>,
    /// Streams of files written since the last checkpoint.
    file_stream: std::collections::HashMap<u64, Stream>,
    /// Streams of overwritten file blocks written since the last
    /// checkpoint, by how long the version they replace lived.
    pub(crate) block_stream: std::collections::HashMap<u64, Stream>,
    /// Streams of blocks the cleaner moved since the last checkpoint.
    pub(crate) moved_stream: std::collections::HashMap<u64, Stream>,
    /// The next checkpoint ends an fsync, which promises one flush: it
    /// writes everything to the log (see `checkpoint_inner`).
    pub one_flush_next: bool,
    /// Blocks written per stream since mount.
    pub blocks_written: [u64; 4],
}

impl Streams {
    pub fn new(enabled: bool) -> Streams {
        Streams {
            enabled,
            ..Default::default()
        }
    }

    /// Files whose last write time is remembered.
    pub fn history_len(&self) -> usize {
        self.file_last_write.len()
    }

    /// Forget the per-checkpoint routing (the blocks are placed).
    pub(crate) fn checkpoint_done(&mut self) {
        self.file_stream.clear();
        self.block_stream.clear();
        self.moved_stream.clear();
    }
}

impl Store {
    /// After a mount: reopen each data stream's partly filled segment (its
    /// most recently written one with room for a record) instead of
    /// starting in a fresh one. Otherwise every mount leaves up to three
    /// segments partly filled for the cleaner to compact (measured: eight
    /// mounts that each wrote a little cold data used eight cold segments).
    /// Appending is safe after a crash too: the SUFILE's count ends the
    /// segment's records, and blocks past it are garbage to overwrite.
    pub(crate) fn resume_stream_heads(&mut self) {
        if !self.streams.enabled {
            return;
        }
        for s in Stream::DATA {
            let best = (0..self.segs.nsegments())
                .filter(|&g| {
                    let u = &self.segs.usage[g as usize];
                    Stream::from_flags(u.flags) == s
                        && u.nblocks > 0
                        && self.head_has_room(u.nblocks)
                        && !self.segs.reserved.contains(&g)
                        && !self.segs.pending_free.contains(&g)
                })
                .max_by_key(|&g| {
                    let u = &self.segs.usage[g as usize];
                    (u.lastmod_secs, u.nblocks)
                });
            if let Some(g) = best {
                self.segs.reserved.insert(g);
                self.streams.heads[s as usize - 1] = Some(DataHead {
                    seg: g,
                    off: self.segs.usage[g as usize].nblocks,
                });
            }
        }
    }

    /// Whether a data stream's segment written up to `off` still takes a
    /// record (a summary block and a payload block); else it is full.
    pub(crate) fn head_has_room(&self, off: u32) -> bool {
        off + 2 <= self.geo.segment_blocks
    }

    /// Whether the next checkpoint may use the data streams: they are
    /// enabled and free segments can spare what they hold open.
    pub(crate) fn streams_can_run(&self) -> bool {
        self.streams.enabled
            && self.segs.free_count() >= self.reserve_segments() + 2 * Stream::DATA.len() as u64
    }

    /// Segments the data streams may leave partly filled, if they run.
    pub(crate) fn stream_segments_held(&self) -> u64 {
        if self.streams_can_run() {
            Stream::DATA.len() as u64
        } else {
            0
        }
    }

    fn mean_rewrite_interval(&self) -> f64 {
        self.blocks_used.max(1) as f64
    }

    /// A user write of `nblocks` blocks to file `ino`: classify the file.
    pub fn note_user_write(&mut self, ino: u64, nblocks: u64) {
        if !self.streams.enabled {
            return;
        }
        let now = self.streams.clock;
        if self.streams.cno_base.is_none() {
            self.streams.cno_base = Some((now, self.cur_cno));
        }
        let since = self
            .streams
            .file_last_write
            .get(&ino)
            .map(|&t| now.saturating_sub(t));
        let t =
            TemperatureClassifier::default().classify_write(since, self.mean_rewrite_interval());
        // Hot stays hot until the next checkpoint places the file's blocks.
        let s = if t == Temperature::Hot {
            Stream::HotUser
        } else {
            Stream::ColdUser
        };
        let e = self.streams.file_stream.entry(ino).or_insert(s);
        if s == Stream::HotUser {
            *e = s;
        }
        if self.streams.file_last_write.len() >= FILE_HISTORY_MAX {
            self.streams.file_last_write.clear();
        }
        self.streams.file_last_write.insert(ino, now);
        self.streams.clock += nblocks;
    }

    /// Where an overwrite goes whose replaced version was written in
    /// checkpoint `prev_start` (0: no replaced version): hot if that
    /// version lived less than the mean rewrite interval, else cold; `None`
    /// when it cannot tell (no replaced version, or no exchange rate
    /// between checkpoints and user writes yet), and the file decides.
    pub(crate) fn overwrite_stream(&self, prev_start: u64) -> Option<Stream> {
        if !self.streams.enabled || prev_start == 0 {
            return None;
        }
        let lived = self.user_write_age(prev_start)?;
        let t = TemperatureClassifier::default()
            .classify_write(Some(lived), self.mean_rewrite_interval());
        Some(if t == Temperature::Hot {
            Stream::HotUser
        } else {
            Stream::ColdUser
        })
    }

    /// The cleaner moves block `v` (DAT entry `e`): a live block by how long
    /// the version it replaced lived when that is known (a cold block the
    /// application wrote recently is still cold), else by its age; a dead
    /// one kept for a snapshot or checkpoint to the cleaner stream.
    pub(crate) fn note_moved(&mut self, v: u64, e: &crate::meta::dat_entry::DatEntry, live: bool) {
        if !self.streams.enabled {
            return;
        }
        if !live {
            self.streams.moved_stream.insert(v, Stream::Cleaner);
            return;
        }
        let age = if e.prev_start != 0 && e.prev_start < e.start {
            self.cnos_to_user_writes(e.start - e.prev_start)
        } else {
            self.user_write_age(e.start)
        };
        let t = TemperatureClassifier::default().classify_write(age, self.mean_rewrite_interval());
        let s = if t == Temperature::Hot {
            Stream::HotUser
        } else {
            Stream::Cleaner
        };
        self.streams.moved_stream.insert(v, s);
    }

    /// User blocks written since checkpoint `start`, estimated from the
    /// user blocks per checkpoint since mount; `None` (unknown: cold) before
    /// this mount's writes have spanned a checkpoint.
    fn user_write_age(&self, start: u64) -> Option<u64> {
        self.cnos_to_user_writes(self.cur_cno.saturating_sub(start))
    }

    /// `cnos` checkpoints in user blocks written, at the rate since mount.
    fn cnos_to_user_writes(&self, cnos: u64) -> Option<u64> {
        let (clock0, cno0) = self.streams.cno_base?;
        let clock = self.streams.clock.saturating_sub(clock0);
        let since = self.cur_cno.saturating_sub(cno0);
        if clock == 0 || since == 0 {
            return None;
        }
        Some((cnos as f64 * clock as f64 / since as f64) as u64)
    }

    /// Whether file `ino` is hot in the checkpoint being built (its blocks
    /// go to the hot stream).
    pub(crate) fn file_is_hot(&self, ino: u64) -> bool {
        self.streams.file_stream.get(&ino) == Some(&Stream::HotUser)
    }

    /// Count a block placed in stream `st` under what sent it there
    /// (`StoreStats::stream_writes`): "moved to hot", "moved to cleaner",
    /// "block to hot"/"to cold" (a first write, or routed by the replaced
    /// version's lifetime), "file to hot"/"to cold" (by the file's history),
    /// "meta".
    pub(crate) fn note_stream_write(&mut self, v: u64, o: &Owner, st: Stream) {
        let why = if self.streams.moved_stream.contains_key(&v) {
            match st {
                Stream::HotUser => "moved to hot",
                _ => "moved to cleaner",
            }
        } else if self.streams.block_stream.contains_key(&v) {
            match st {
                Stream::HotUser => "block to hot",
                _ => "block to cold",
            }
        } else if st == Stream::Meta {
            if o.kind == BlockKind::Data && o.ino >= FIRST_USER_INO {
                "file data to meta"
            } else {
                "meta"
            }
        } else {
            match st {
                Stream::HotUser => "file to hot",
                _ => "file to cold",
            }
        };
        *self.stats.stream_writes.entry(why).or_default() += 1;
    }

    /// The stream dirty virtual block `v` (owned by `o`) is written to.
    pub(crate) fn stream_of(&self, v: u64, o: &Owner) -> Stream {
        if !self.streams.active {
            return Stream::Meta;
        }
        if let Some(&s) = self.streams.moved_stream.get(&v) {
            return s;
        }
        if let Some(&s) = self.streams.block_stream.get(&v) {
            return s;
        }
        if o.kind == BlockKind::Data && o.ino >= FIRST_USER_INO {
            return *self
                .streams
                .file_stream
                .get(&o.ino)
                .unwrap_or(&Stream::ColdUser);
        }
        Stream::Meta
    }
}
