//! The simulated log: segments, the block → slot map, open streams and the cleaner loop.

use std::collections::VecDeque;

use lsfs_policy::gc::{Greedy, PlugGate, SegmentUsage, SelectionPolicy, Temperature};

use super::oracle::Oracle;
use super::placement::Placement;
use super::{GcConfig, GcPolicy, GcResult, ThreadedLogging};
use crate::access::Access;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Open,
    Closed,
}

#[derive(Clone, Copy)]
struct Segment {
    state: State,
    written_blocks: u32,
    live_blocks: u32,
    lastmod: u64,
    nlive_lastmod: u64,
    temperature: Temperature,
}

#[derive(Default)]
struct Counters {
    user_writes: u64,
    copied_blocks: u64,
    read_blocks: u64,
    segments_cleaned: u64,
    victim_utilization_sum: f64,
    plugged_blocks: u64,
}

pub(super) struct SegmentLog {
    segment_blocks: u32,
    segments: Vec<Segment>,
    /// Global slot (segment · segment_blocks + offset) → block, NONE if dead or unwritten.
    slot_owner: Vec<u32>,
    block_slot: Vec<u32>,
    block_last_write: Vec<u64>,
    free: Vec<u32>,
    open: Vec<u32>,
    now: u64,
    live_blocks: u64,
    policy: Box<dyn SelectionPolicy>,
    placement: Placement,
    /// The cleaner runs when fewer segments than this are free.
    low_water_segments: usize,
    clean_batch_segments: usize,
    measuring: bool,
    counters: Counters,
    segment_histogram: Vec<u64>,
    victim_histogram: Vec<u64>,
    usage: Vec<SegmentUsage>,
    threaded: ThreadedLogging,
    random_write_cost: f64,
    /// Per stream: the segment whose holes user writes plug (NONE if none), and the next slot
    /// offset to look at. A target is in state Open, so the cleaner leaves it alone.
    plug_target: Vec<u32>,
    plug_cursor: Vec<u32>,
    /// Adaptive mode: victims the policy picked that are cheaper to plug than to clean, in
    /// order (state Open); user writes fill the head's holes from `queue_cursor` on.
    plug_queue: VecDeque<u32>,
    queue_cursor: u32,
    /// Adaptive mode: plug or clean, victim by victim (the engine's cleaner uses the same gate).
    gate: PlugGate,
    /// Tests: check the invariants every this many user writes (0: never).
    check_every: u64,
}

impl SegmentLog {
    pub(super) fn run(config: &GcConfig) -> GcResult {
        Self::run_checked(config, 0)
    }

    /// [`Self::run`], checking [`Self::check_invariants`] every `check_every` user writes and
    /// at the end (0: never).
    pub(super) fn run_checked(config: &GcConfig, check_every: u64) -> GcResult {
        let mut log = Self::new(config);
        log.check_every = check_every;
        let live = log.live_blocks;
        // At low utilization a few overwrites per live block do not even wrap the log once, so
        // warm up for at least two disk-fulls and measure at least one.
        let disk = log.slot_owner.len() as u64;
        let warmup = ((config.warmup_writes_per_block * live as f64) as u64).max(2 * disk);
        let measure = ((config.measure_writes_per_block * live as f64) as u64).max(disk);
        let mut access = Access::new(&config.access, live, config.seed);
        if let GcPolicy::Oracle = config.policy {
            let sequence: Vec<u32> = (0..warmup + measure)
                .map(|_| access.next_block() as u32)
                .collect();
            log.placement = Placement::Oracle(Box::new(Oracle::new(sequence, live)));
            log.open = vec![NONE; log.placement.stream_count()];
            log.plug_target = vec![NONE; log.placement.stream_count()];
            log.plug_cursor = vec![0; log.placement.stream_count()];
            log.low_water_segments = log.placement.stream_count() + 2;
            log.check_room(config);
        }
        for block in 0..live {
            log.user_write(block);
        }
        for i in 0..warmup + measure {
            if i == warmup {
                log.measuring = true;
            }
            let block = match &log.placement {
                Placement::Oracle(o) => o.sequence[i as usize] as u64,
                _ => access.next_block(),
            };
            log.user_write(block);
        }
        if check_every > 0 {
            let placed = log.check_invariants();
            assert_eq!(placed, log.live_blocks, "every block is live at the end");
        }
        log.result(config)
    }

    fn new(config: &GcConfig) -> Self {
        let segment_blocks = config.segment_blocks;
        assert!(segment_blocks > 0);
        let nsegments = (config.disk_blocks / segment_blocks as u64) as usize;
        let disk_blocks = nsegments as u64 * segment_blocks as u64;
        assert!(disk_blocks < NONE as u64, "disk too large for 32-bit slots");
        let live_blocks = (config.utilization * disk_blocks as f64).round() as u64;
        assert!(live_blocks > 0, "utilization leaves no live data");
        let placement = match config.policy {
            GcPolicy::Oracle => Placement::UserAndCleaner, // replaced once the sequence exists
            GcPolicy::Streams(_) => Placement::Temperature(Default::default()),
            GcPolicy::Shared(kind) => {
                let policy = kind.build(config.min_quiet_writes);
                if policy.wants_temperature_streams() {
                    Placement::Temperature(Default::default())
                } else {
                    Placement::UserAndCleaner
                }
            }
        };
        let policy: Box<dyn SelectionPolicy> = match config.policy {
            GcPolicy::Oracle => Box::new(Greedy),
            GcPolicy::Streams(kind) => kind.build(config.min_quiet_writes),
            GcPolicy::Shared(kind) => kind.build(config.min_quiet_writes),
        };
        let empty = Segment {
            state: State::Free,
            written_blocks: 0,
            live_blocks: 0,
            lastmod: 0,
            nlive_lastmod: 0,
            temperature: Temperature::Mixed,
        };
        let log = Self {
            segment_blocks,
            segments: vec![empty; nsegments],
            slot_owner: vec![NONE; disk_blocks as usize],
            block_slot: vec![NONE; live_blocks as usize],
            block_last_write: vec![u64::MAX; live_blocks as usize],
            free: (0..nsegments as u32).rev().collect(),
            open: vec![NONE; placement.stream_count()],
            plug_target: vec![NONE; placement.stream_count()],
            plug_cursor: vec![0; placement.stream_count()],
            now: 0,
            live_blocks,
            policy,
            low_water_segments: placement.stream_count() + 2,
            placement,
            clean_batch_segments: config.clean_batch_segments.max(1),
            measuring: false,
            counters: Counters::default(),
            segment_histogram: vec![0; config.histogram_bins.max(1)],
            victim_histogram: vec![0; config.histogram_bins.max(1)],
            usage: Vec::with_capacity(nsegments),
            threaded: config.threaded,
            random_write_cost: config.random_write_cost,
            plug_queue: VecDeque::new(),
            queue_cursor: 0,
            gate: PlugGate::new(
                config.random_write_cost,
                config.threaded == ThreadedLogging::PerVictim,
            ),
            check_every: 0,
        };
        log.check_room(config);
        log
    }

    /// The live data, the open segments and the cleaner's reserve must fit.
    fn check_room(&self, config: &GcConfig) {
        let reserve = self.low_water_segments + self.clean_batch_segments + self.open.len();
        let needed = self.live_blocks + (reserve as u64 + 1) * self.segment_blocks as u64;
        assert!(
            needed <= self.slot_owner.len() as u64,
            "utilization {} leaves no room for {} reserve segments on {} blocks",
            config.utilization,
            reserve,
            self.slot_owner.len()
        );
    }

    fn user_write(&mut self, block: u64) {
        let plug = match self.threaded {
            ThreadedLogging::Off => {
                self.ensure_free_segments();
                false
            }
            _ => self.plug_or_clean(),
        };
        let last = self.block_last_write[block as usize];
        let since = (last != u64::MAX).then(|| self.now - last);
        let stream = self
            .placement
            .user_stream(block, self.now, since, self.live_blocks as f64);
        let hole = if plug { self.next_hole(stream) } else { None };
        if plug && hole.is_none() {
            // No closed segment has a hole: clean after all.
            self.ensure_free_segments();
        }
        self.kill(block);
        match hole {
            Some(slot) => {
                self.plug(block, slot);
                if self.measuring {
                    self.counters.plugged_blocks += 1;
                }
            }
            None => self.append(block, stream),
        }
        self.block_last_write[block as usize] = self.now;
        self.now += 1;
        if self.measuring {
            self.counters.user_writes += 1;
        }
        if self.check_every > 0 && self.now % self.check_every == 0 {
            self.check_invariants();
        }
    }

    /// Threaded modes, before a user write: whether it should plug a hole. Above the
    /// low-water mark every write appends. Below it, `always` plugs (SSR's target, see
    /// [`Self::next_hole`]); `adaptive` asks the policy for victims and, victim by victim,
    /// plugs its holes instead of cleaning it when that is cheaper:
    ///
    /// R < C_clean = 1 + (read + copied) / freed = 2 / (1 − u)   ⇔   u > 1 − 2 / R
    ///
    /// (per freed slot; u = the victim's live share). Plugging a segment's (1 − u)·S holes
    /// costs R·(1 − u)·S, cleaning it 2·S for as many slots, and under uniform writes either
    /// way leaves a segment of its old live blocks plus (1 − u)·S new ones, so the choice is
    /// per segment. Under skewed writes it is not: hot writes plugged into the old, nearly
    /// full cold segments that cost-benefit picks undo the hot/cold separation, the victims
    /// stay expensive and plugging feeds itself. So a victim is plugged only when, besides,
    /// the measured cost of the victims recently cleaned, C̄ = 1 + Σ(read + copied) / Σ freed
    /// (decayed), exceeds R: the more is plugged, the cheaper the cleaned victims, and
    /// plugging backs off (negative feedback instead of lock-in).
    fn plug_or_clean(&mut self) -> bool {
        if self.free.len() >= self.low_water_segments {
            self.release_plug_targets();
            return false;
        }
        if self.threaded == ThreadedLogging::Always {
            return true;
        }
        loop {
            if self.queue_has_hole() {
                return true;
            }
            if self.free.len() >= self.low_water_segments {
                return false;
            }
            for segno in self.select_victims() {
                let s = &self.segments[segno as usize];
                let (written, live) = (s.written_blocks as u64, s.live_blocks as u64);
                if self.gate.should_plug(written, live) {
                    self.segments[segno as usize].state = State::Open;
                    self.plug_queue.push_back(segno as u32);
                } else {
                    self.gate.cleaned(written, live);
                    self.clean_segment(segno as u32);
                }
            }
        }
    }

    /// Adaptive mode: whether the plug queue still has a hole (dropping finished heads).
    fn queue_has_hole(&mut self) -> bool {
        while let Some(&segno) = self.plug_queue.front() {
            let first = segno * self.segment_blocks;
            let written = self.segments[segno as usize].written_blocks;
            let cursor = self.queue_cursor;
            match (cursor..written).find(|&o| self.slot_owner[(first + o) as usize] == NONE) {
                Some(offset) => {
                    self.queue_cursor = offset;
                    return true;
                }
                None => {
                    self.segments[segno as usize].state = State::Closed;
                    self.plug_queue.pop_front();
                    self.queue_cursor = 0;
                }
            }
        }
        false
    }

    /// The next hole of the stream's plug target, choosing a new target when it has none or
    /// the cursor reached its end. None if no closed segment has a hole.
    fn next_hole(&mut self, stream: usize) -> Option<u32> {
        if self.threaded != ThreadedLogging::Always {
            if !self.queue_has_hole() {
                return None;
            }
            let segno = *self.plug_queue.front().expect("a queued target");
            let slot = segno * self.segment_blocks + self.queue_cursor;
            self.queue_cursor += 1;
            return Some(slot);
        }
        loop {
            let segno = self.plug_target[stream];
            if segno == NONE {
                let segno = self.choose_plug_target(stream)?;
                self.segments[segno as usize].state = State::Open;
                self.plug_target[stream] = segno;
                self.plug_cursor[stream] = 0;
                continue;
            }
            let first = segno * self.segment_blocks;
            let written = self.segments[segno as usize].written_blocks;
            let cursor = self.plug_cursor[stream];
            let found = (cursor..written).find(|&o| self.slot_owner[(first + o) as usize] == NONE);
            match found {
                Some(offset) => {
                    self.plug_cursor[stream] = offset + 1;
                    return Some(first + offset);
                }
                None => {
                    self.segments[segno as usize].state = State::Closed;
                    self.plug_target[stream] = NONE;
                }
            }
        }
    }

    /// SSR's choice: the closed segment with the fewest live blocks among those of the
    /// stream's temperature that have a hole, else among all with a hole; lowest number on ties.
    fn choose_plug_target(&self, stream: usize) -> Option<u32> {
        let temperature = self.placement.temperature(stream);
        let mut best_same: Option<(u32, u32)> = None;
        let mut best_any: Option<(u32, u32)> = None;
        for (segno, s) in self.segments.iter().enumerate() {
            if s.state != State::Closed || s.live_blocks >= s.written_blocks {
                continue;
            }
            let candidate = (s.live_blocks, segno as u32);
            if best_any.is_none_or(|b| candidate < b) {
                best_any = Some(candidate);
            }
            if s.temperature == temperature && best_same.is_none_or(|b| candidate < b) {
                best_same = Some(candidate);
            }
        }
        best_same.or(best_any).map(|(_, segno)| segno)
    }

    /// Give the plug targets back to the cleaner (their unvisited holes stay holes).
    fn release_plug_targets(&mut self) {
        for target in self.plug_target.iter_mut() {
            if *target != NONE {
                self.segments[*target as usize].state = State::Closed;
                *target = NONE;
            }
        }
        for segno in self.plug_queue.drain(..) {
            self.segments[segno as usize].state = State::Closed;
        }
        self.queue_cursor = 0;
    }

    /// Write `block` into the dead slot `slot` of a full segment. The segment's age becomes
    /// the live-weighted mean of its old age and now (F2FS's `update_segment_mtime`).
    fn plug(&mut self, block: u64, slot: u32) {
        debug_assert_eq!(self.slot_owner[slot as usize], NONE);
        let seg = &mut self.segments[(slot / self.segment_blocks) as usize];
        debug_assert!(slot % self.segment_blocks < seg.written_blocks);
        let live = seg.live_blocks as u64;
        seg.lastmod = (seg.lastmod * live + self.now) / (live + 1);
        seg.live_blocks += 1;
        seg.nlive_lastmod = self.now;
        self.slot_owner[slot as usize] = block as u32;
        self.block_slot[block as usize] = slot;
    }

    /// Every live block sits in exactly one slot that names it back, and every segment's live
    /// count is the number of its slots that hold a block. Panics otherwise; returns the
    /// number of blocks placed.
    pub(super) fn check_invariants(&self) -> u64 {
        let mut live_total = 0u64;
        for (segno, s) in self.segments.iter().enumerate() {
            let first = segno * self.segment_blocks as usize;
            let slots = &self.slot_owner[first..first + self.segment_blocks as usize];
            let live = slots.iter().filter(|b| **b != NONE).count() as u32;
            assert_eq!(live, s.live_blocks, "segment {segno}: live count");
            assert!(
                slots[s.written_blocks as usize..]
                    .iter()
                    .all(|b| *b == NONE),
                "segment {segno}: a block beyond the written part"
            );
            if s.state == State::Free {
                assert_eq!(s.live_blocks, 0, "free segment {segno} holds blocks");
            }
            live_total += live as u64;
        }
        for (slot, &b) in self.slot_owner.iter().enumerate() {
            if b != NONE {
                assert_eq!(self.block_slot[b as usize], slot as u32, "block {b}");
            }
        }
        let placed = self.block_slot.iter().filter(|s| **s != NONE).count() as u64;
        assert_eq!(placed, live_total, "blocks with a slot vs occupied slots");
        for (stream, &t) in self.plug_target.iter().enumerate() {
            if t != NONE {
                assert!(
                    self.segments[t as usize].state == State::Open,
                    "plug target of stream {stream}"
                );
            }
        }
        for &t in &self.plug_queue {
            assert!(
                self.segments[t as usize].state == State::Open,
                "queued plug target {t}"
            );
        }
        placed
    }

    fn kill(&mut self, block: u64) {
        let slot = self.block_slot[block as usize];
        if slot == NONE {
            return;
        }
        self.slot_owner[slot as usize] = NONE;
        let seg = &mut self.segments[(slot / self.segment_blocks) as usize];
        seg.live_blocks -= 1;
        seg.nlive_lastmod = self.now;
        self.block_slot[block as usize] = NONE;
    }

    fn append(&mut self, block: u64, stream: usize) {
        if self.open[stream] == NONE {
            let segno = self.free.pop().expect("the cleaner reserve ran out");
            let seg = &mut self.segments[segno as usize];
            debug_assert!(seg.state == State::Free && seg.live_blocks == 0);
            seg.state = State::Open;
            seg.written_blocks = 0;
            seg.temperature = self.placement.temperature(stream);
            self.open[stream] = segno;
        }
        let segno = self.open[stream];
        let seg = &mut self.segments[segno as usize];
        let slot = segno * self.segment_blocks + seg.written_blocks;
        seg.written_blocks += 1;
        seg.live_blocks += 1;
        seg.lastmod = self.now;
        seg.nlive_lastmod = self.now;
        if seg.written_blocks == self.segment_blocks {
            seg.state = State::Closed;
            self.open[stream] = NONE;
        }
        self.slot_owner[slot as usize] = block as u32;
        self.block_slot[block as usize] = slot;
    }

    fn ensure_free_segments(&mut self) {
        while self.free.len() < self.low_water_segments {
            self.clean_pass();
        }
    }

    fn clean_pass(&mut self) {
        for segno in self.select_victims() {
            self.clean_segment(segno as u32);
        }
    }

    /// The policy's victims among the closed segments (sampling the utilization histogram).
    fn select_victims(&mut self) -> Vec<u64> {
        self.usage.clear();
        for (segno, s) in self.segments.iter().enumerate() {
            if s.state == State::Closed {
                self.usage.push(SegmentUsage {
                    segno: segno as u64,
                    nblocks: s.written_blocks,
                    nlive: s.live_blocks,
                    nsnapshot: 0,
                    lastmod_secs: s.lastmod,
                    nlive_lastmod_secs: s.nlive_lastmod,
                    temperature: s.temperature,
                    read_cost: lsfs_policy::gc::READ_COST,
                });
            }
        }
        if self.measuring {
            let bins = self.segment_histogram.len();
            for u in &self.usage {
                self.segment_histogram[bin_of(u.utilization(), bins)] += 1;
            }
        }
        let victims = self
            .policy
            .select_victims(&self.usage, self.now, self.clean_batch_segments);
        assert!(
            !victims.is_empty(),
            "no reclaimable segment: the disk is full of live data"
        );
        victims
    }

    fn clean_segment(&mut self, segno: u32) {
        let seg = self.segments[segno as usize];
        assert!(
            seg.state == State::Closed,
            "victim {segno} is not a closed segment"
        );
        let first = (segno * self.segment_blocks) as usize;
        let mut live: Vec<u32> = self.slot_owner[first..first + seg.written_blocks as usize]
            .iter()
            .copied()
            .filter(|b| *b != NONE)
            .collect();
        debug_assert_eq!(live.len(), seg.live_blocks as usize);
        if self.measuring {
            let u = seg.live_blocks as f64 / seg.written_blocks as f64;
            let c = &mut self.counters;
            c.segments_cleaned += 1;
            c.copied_blocks += seg.live_blocks as u64;
            if seg.live_blocks > 0 {
                c.read_blocks += seg.written_blocks as u64;
            }
            c.victim_utilization_sum += u;
            let bins = self.victim_histogram.len();
            self.victim_histogram[bin_of(u, bins)] += 1;
        }
        // Rosenblum's cleaner writes survivors oldest first, so similar ages share segments.
        live.sort_by_key(|b| self.block_last_write[*b as usize]);
        for b in live {
            let since = self.now - self.block_last_write[b as usize];
            let stream =
                self.placement
                    .cleaner_stream(b as u64, self.now, since, self.live_blocks as f64);
            self.kill(b as u64);
            self.append(b as u64, stream);
        }
        let seg = &mut self.segments[segno as usize];
        debug_assert_eq!(seg.live_blocks, 0);
        seg.state = State::Free;
        seg.written_blocks = 0;
        self.free.push(segno);
    }

    fn result(&self, config: &GcConfig) -> GcResult {
        let c = &self.counters;
        let user = c.user_writes.max(1) as f64;
        let appended = c.user_writes - c.plugged_blocks;
        let cost = (appended as f64
            + self.random_write_cost * c.plugged_blocks as f64
            + (c.copied_blocks + c.read_blocks) as f64)
            / user;
        let cleaned_blocks = c.segments_cleaned as f64 * self.segment_blocks as f64;
        GcResult {
            policy: config.policy.name().to_string(),
            access: config.access.label(),
            utilization: self.live_blocks as f64 / self.slot_owner.len() as f64,
            disk_blocks: self.slot_owner.len() as u64,
            segment_blocks: self.segment_blocks,
            user_writes: c.user_writes,
            copied_blocks: c.copied_blocks,
            read_blocks: c.read_blocks,
            segments_cleaned: c.segments_cleaned,
            write_amplification: (c.user_writes + c.copied_blocks) as f64 / user,
            write_cost: (c.user_writes + c.copied_blocks + c.read_blocks) as f64 / user,
            cleaner_efficiency: if c.segments_cleaned == 0 {
                1.0
            } else {
                1.0 - c.copied_blocks as f64 / cleaned_blocks
            },
            mean_victim_utilization: if c.segments_cleaned == 0 {
                0.0
            } else {
                c.victim_utilization_sum / c.segments_cleaned as f64
            },
            segment_histogram: self.segment_histogram.clone(),
            victim_histogram: self.victim_histogram.clone(),
            threaded: self.threaded,
            random_write_cost: self.random_write_cost,
            plugged_blocks: c.plugged_blocks,
            cost: if c.plugged_blocks == 0 {
                (c.user_writes + c.copied_blocks + c.read_blocks) as f64 / user
            } else {
                cost
            },
        }
    }
}

fn bin_of(u: f64, bins: usize) -> usize {
    ((u * bins as f64) as usize).min(bins - 1)
}
