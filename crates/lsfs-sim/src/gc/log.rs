//! The simulated log: segments, the block → slot map, open streams and the cleaner loop.

use lsfs_policy::gc::{Greedy, SegmentUsage, SelectionPolicy, Temperature};

use super::oracle::Oracle;
use super::placement::Placement;
use super::{GcConfig, GcPolicy, GcResult};
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
}

impl SegmentLog {
    pub(super) fn run(config: &GcConfig) -> GcResult {
        let mut log = Self::new(config);
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
        self.ensure_free_segments();
        let last = self.block_last_write[block as usize];
        let since = (last != u64::MAX).then(|| self.now - last);
        let stream = self
            .placement
            .user_stream(block, self.now, since, self.live_blocks as f64);
        self.kill(block);
        self.append(block, stream);
        self.block_last_write[block as usize] = self.now;
        self.now += 1;
        if self.measuring {
            self.counters.user_writes += 1;
        }
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
        for segno in victims {
            self.clean_segment(segno as u32);
        }
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
        }
    }
}

fn bin_of(u: f64, bins: usize) -> usize {
    ((u * bins as f64) as usize).min(bins - 1)
}
