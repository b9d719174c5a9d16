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
//!
//! [`Streams`] holds the classifier's state and knows nothing of the store:
//! it is told the checkpoint being built and the mean rewrite interval. The
//! store's side (opening heads, whether streams may run) is
//! meta/stream_use.rs.

use crate::cache::Owner;
use crate::layout::FIRST_USER_INO;
use crate::log::record::BlockKind;
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

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// A user write of `nblocks` blocks to file `ino`, in checkpoint
    /// `cur_cno`: classify the file against `mean_interval` (user blocks).
    pub(crate) fn note_user_write(
        &mut self,
        ino: u64,
        nblocks: u64,
        cur_cno: u64,
        mean_interval: f64,
    ) {
        if !self.enabled {
            return;
        }
        let now = self.clock;
        if self.cno_base.is_none() {
            self.cno_base = Some((now, cur_cno));
        }
        let since = self
            .file_last_write
            .get(&ino)
            .map(|&t| now.saturating_sub(t));
        let t = TemperatureClassifier::default().classify_write(since, mean_interval);
        // Hot stays hot until the next checkpoint places the file's blocks.
        let s = if t == Temperature::Hot {
            Stream::HotUser
        } else {
            Stream::ColdUser
        };
        let e = self.file_stream.entry(ino).or_insert(s);
        if s == Stream::HotUser {
            *e = s;
        }
        if self.file_last_write.len() >= FILE_HISTORY_MAX {
            self.file_last_write.clear();
        }
        self.file_last_write.insert(ino, now);
        self.clock += nblocks;
    }

    /// Where an overwrite goes whose replaced version was written in
    /// checkpoint `prev_start` (0: no replaced version): hot if that
    /// version lived less than the mean rewrite interval, else cold; `None`
    /// when it cannot tell (no replaced version, or no exchange rate
    /// between checkpoints and user writes yet), and the file decides.
    pub(crate) fn overwrite_stream(
        &self,
        prev_start: u64,
        cur_cno: u64,
        mean_interval: f64,
    ) -> Option<Stream> {
        if !self.enabled || prev_start == 0 {
            return None;
        }
        let lived = self.user_write_age(prev_start, cur_cno)?;
        let t = TemperatureClassifier::default().classify_write(Some(lived), mean_interval);
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
    pub(crate) fn note_moved(
        &mut self,
        v: u64,
        e: &crate::meta::dat_entry::DatEntry,
        live: bool,
        cur_cno: u64,
        mean_interval: f64,
    ) {
        if !self.enabled {
            return;
        }
        if !live {
            self.moved_stream.insert(v, Stream::Cleaner);
            return;
        }
        let age = if e.prev_start != 0 && e.prev_start < e.start {
            self.cnos_to_user_writes(e.start - e.prev_start, cur_cno)
        } else {
            self.user_write_age(e.start, cur_cno)
        };
        let t = TemperatureClassifier::default().classify_write(age, mean_interval);
        let s = if t == Temperature::Hot {
            Stream::HotUser
        } else {
            Stream::Cleaner
        };
        self.moved_stream.insert(v, s);
    }

    /// User blocks written since checkpoint `start`, estimated from the
    /// user blocks per checkpoint since mount; `None` (unknown: cold) before
    /// this mount's writes have spanned a checkpoint.
    fn user_write_age(&self, start: u64, cur_cno: u64) -> Option<u64> {
        self.cnos_to_user_writes(cur_cno.saturating_sub(start), cur_cno)
    }

    /// `cnos` checkpoints in user blocks written, at the rate since mount.
    fn cnos_to_user_writes(&self, cnos: u64, cur_cno: u64) -> Option<u64> {
        let (clock0, cno0) = self.cno_base?;
        let clock = self.clock.saturating_sub(clock0);
        let since = cur_cno.saturating_sub(cno0);
        if clock == 0 || since == 0 {
            return None;
        }
        Some((cnos as f64 * clock as f64 / since as f64) as u64)
    }

    /// Whether file `ino` is hot in the checkpoint being built (its blocks
    /// go to the hot stream).
    pub(crate) fn file_is_hot(&self, ino: u64) -> bool {
        self.file_stream.get(&ino) == Some(&Stream::HotUser)
    }

    /// What sent block `v` (owned by `o`) to stream `st`
    /// (`StoreStats::stream_writes`): "moved to hot", "moved to cleaner",
    /// "block to hot"/"to cold" (a first write, or routed by the replaced
    /// version's lifetime), "file to hot"/"to cold" (by the file's history),
    /// "meta".
    pub(crate) fn why(&self, v: u64, o: &Owner, st: Stream) -> &'static str {
        if self.moved_stream.contains_key(&v) {
            match st {
                Stream::HotUser => "moved to hot",
                _ => "moved to cleaner",
            }
        } else if self.block_stream.contains_key(&v) {
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
        }
    }

    /// The stream dirty virtual block `v` (owned by `o`) is written to.
    pub(crate) fn stream_of(&self, v: u64, o: &Owner) -> Stream {
        if !self.active {
            return Stream::Meta;
        }
        if let Some(&s) = self.moved_stream.get(&v) {
            return s;
        }
        if let Some(&s) = self.block_stream.get(&v) {
            return s;
        }
        if o.kind == BlockKind::Data && o.ino >= FIRST_USER_INO {
            return *self.file_stream.get(&o.ino).unwrap_or(&Stream::ColdUser);
        }
        Stream::Meta
    }

    /// Forget the per-checkpoint routing (the blocks are placed).
    pub(crate) fn checkpoint_done(&mut self) {
        self.file_stream.clear();
        self.block_stream.clear();
        self.moved_stream.clear();
    }
}
