//! The store's use of the write streams (meta/stream.rs): reopening the
//! data streams' segments after a mount, whether streams may run, and the
//! classifier fed with the store's clock (the checkpoint being built) and
//! its live block count.

use crate::cache::Owner;
use crate::meta::store::Store;
use crate::meta::stream::{DataHead, Stream};

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

    /// The mean rewrite interval of the data set, in user blocks written:
    /// at that write rate every live block is rewritten once per that many.
    fn mean_rewrite_interval(&self) -> f64 {
        self.blocks_used.max(1) as f64
    }

    /// A user write of `nblocks` blocks to file `ino`: classify the file.
    pub fn note_user_write(&mut self, ino: u64, nblocks: u64) {
        let mean = self.mean_rewrite_interval();
        self.streams
            .note_user_write(ino, nblocks, self.cur_cno, mean);
    }

    /// Where an overwrite goes whose replaced version was written in
    /// checkpoint `prev_start` ([`crate::meta::stream::Streams::overwrite_stream`]).
    pub(crate) fn overwrite_stream(&self, prev_start: u64) -> Option<Stream> {
        self.streams
            .overwrite_stream(prev_start, self.cur_cno, self.mean_rewrite_interval())
    }

    /// The cleaner moves block `v` (DAT entry `e`, `live` or not).
    pub(crate) fn note_moved(&mut self, v: u64, e: &crate::meta::dat_entry::DatEntry, live: bool) {
        let mean = self.mean_rewrite_interval();
        self.streams.note_moved(v, e, live, self.cur_cno, mean);
    }

    /// Whether file `ino` is hot in the checkpoint being built.
    pub(crate) fn file_is_hot(&self, ino: u64) -> bool {
        self.streams.file_is_hot(ino)
    }

    /// Count a block placed in stream `st` under what sent it there
    /// (`StoreStats::stream_writes`).
    pub(crate) fn note_stream_write(&mut self, v: u64, o: &Owner, st: Stream) {
        let why = self.streams.why(v, o, st);
        *self.stats.stream_writes.entry(why).or_default() += 1;
    }

    /// The stream dirty virtual block `v` (owned by `o`) is written to.
    pub(crate) fn stream_of(&self, v: u64, o: &Owner) -> Stream {
        self.streams.stream_of(v, o)
    }
}
