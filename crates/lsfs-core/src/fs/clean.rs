//! Running the cleaner on a mounted file system: background passes driven
//! by free space, idle time and the power source; foreground passes before
//! ENOSPC. A pass writes the blocks it moved and flushes, but no
//! checkpoint: the victims become free at the next checkpoint, which the
//! writer takes when it needs their segments (batching passes is as safe,
//! since until then the old copies are what recovery reads).

use crate::error::{Error, Result};
use crate::fs::Lsfs;
use crate::gc::relocate::{KeepCheckpoints, Relocated, RelocationPlan};
use crate::gc::{
    on_battery, CleanerConfig, CleanerStats, FixedPower, PassReport, PowerSource, SelectionPolicy,
};
use std::time::Duration;

/// Segments of room for copies the low-water mark keeps above the reserve
/// and the streams' open segments (see [`Lsfs::low_water_segments`]).
const LOW_WATER_ROOM_SEGMENTS: u64 = 4;

pub struct Cleaner {
    pub config: CleanerConfig,
    policy: Box<dyn SelectionPolicy>,
    pub stats: CleanerStats,
    /// Background cleaning on (`lsfs gc stop` turns it off).
    pub enabled: bool,
    last_check: Duration,
    pub(crate) last_activity: Duration,
    started: Duration,
    /// Blocks copied in the current one-second window, for the rate bound.
    window: (Duration, u64),
    pub last_pass: Option<PassReport>,
    /// Victims a pass under pressure found not worth cleaning, with their
    /// SUFILE counts and when: skipped while the counts stay the same, for
    /// [`FUTILE_PLAN_SECS`]. Under a long protection period most dead
    /// blocks are protected, the same candidates come first in every pass,
    /// and planning each (reading its summaries, a DAT lookup per block)
    /// again every second kept a core busy (measured with fsx: 53 plans
    /// aborted per pass, 1,209 passes in 21 minutes).
    futile: std::collections::HashMap<u64, ((u32, u32, u32), u64)>,
    /// Threaded logging: plug or clean, victim by victim (the simulator's
    /// gate, with the cost of the victims this mount cleaned).
    gate: lsfs_policy::gc::PlugGate,
    /// When the log last said how far back checkpoints are kept, and what.
    window_said: Option<(Duration, u64)>,
    /// What `power = "auto"` asks (set by the front end; AC by default).
    power: Box<dyn PowerSource>,
}

/// How often at most the log repeats how far back checkpoints are kept,
/// unless the window has halved since.
const WINDOW_LOG_SECS: u64 = 60;

/// Holes (in segments) prepared and not yet used beyond which a pass under
/// pressure cleans instead of plugging: holes take only user data, the
/// metadata of those writes and every checkpoint need free segments, which
/// only cleaning makes.
pub(crate) const PLUG_HOLES_SEGMENTS: u64 = 1;

/// Room for appending (in segments, after the reserve and what is dirty)
/// below which a pass cleans instead of plugging: holes take user data
/// only, and when appending runs short the writer falls back on the
/// last-resort passes, which cost far more than plugging saves (measured
/// at 92 % full: docs/CLEANER.md §5).
const PLUG_APPEND_ROOM_SEGMENTS: u64 = 2;

/// What cleaning the victim of `plan` costs, for the plug gate, in blocks:
/// it reads the victim, copies what is still needed and rewrites the DAT
/// blocks the moves change; it frees the victim net of those writes.
fn clean_cost_terms(plan: &RelocationPlan) -> (u64, u64, u64) {
    let copied = plan.blocks_written();
    (
        plan.nblocks as u64,
        copied,
        (plan.nblocks as u64).saturating_sub(copied),
    )
}

/// Whether a pass runs under space pressure ("foreground": before ENOSPC,
/// "low space": below the low-water mark): it then reclaims fastest, gives
/// up plain checkpoints its victims need gone, and never aborts late.
fn pass_is_pressed(reason: &str) -> bool {
    matches!(reason, "foreground" | "low space")
}

/// How long a futile verdict stands while its segment's counts do not
/// change (protection ends and checkpoints expire with time alone).
const FUTILE_PLAN_SECS: u64 = 30;

/// How a pass treats its candidates, fixed by why it runs.
struct PassRules {
    /// Space is short: nothing is held back for kept checkpoints.
    pressed: bool,
    /// A victim that gains too little is re-aged rather than marked futile.
    late_abort: bool,
    /// Whose dead blocks relocation keeps.
    keep: KeepCheckpoints,
    /// Blocks a victim must free to be worth cleaning.
    min_gain: i64,
    /// Blocks the pass may write ([`Lsfs::pass_budget`]).
    budget: u64,
}

impl Cleaner {
    /// A cleaner whose intervals start at `now`, a `Clock::mono` reading.
    pub fn new(config: CleanerConfig, now: Duration) -> Cleaner {
        let gate = lsfs_policy::gc::PlugGate::new(config.random_write_cost, false);
        Cleaner {
            policy: config.policy(),
            config,
            stats: CleanerStats::default(),
            enabled: true,
            last_check: now,
            last_activity: now,
            started: now,
            window: (now, 0),
            last_pass: None,
            futile: Default::default(),
            gate,
            window_said: None,
            power: Box::new(FixedPower::AC),
        }
    }

    /// Where `power = "auto"` learns the power state from now on.
    pub fn set_power_source(&mut self, source: Box<dyn PowerSource>) {
        self.power = source;
    }

    /// Whether background cleaning counts the machine as on battery now.
    pub fn on_battery(&self) -> bool {
        on_battery(&self.config, &*self.power)
    }

    /// Say in the log how far back plain checkpoints are kept after space
    /// pressure gave some up: at most once a minute, or when it has halved.
    fn note_window(&mut self, secs: u64, now: Duration) {
        let due = self.window_said.is_none_or(|(at, said)| {
            now.saturating_sub(at).as_secs() >= WINDOW_LOG_SECS || secs < said / 2
        });
        if due {
            tracing::info!(
                "space is short: plain checkpoints are now kept for the last {secs} s \
                 (the oldest given up first; snapshots are kept)"
            );
            self.window_said = Some((now, secs));
        }
    }

    pub fn set_policy(&mut self, name: &str) -> std::result::Result<(), String> {
        let kind = crate::gc::parse_policy(name)?;
        self.reconfigure(|c| c.policy = kind)?;
        self.policy = self.config.policy();
        Ok(())
    }

    /// Switch threaded logging at run time (`lsfs gc threaded`). Holes
    /// already prepared stay usable whatever the mode: they are valid
    /// segments with their summaries in the SSA.
    pub fn set_threaded_logging(&mut self, mode: &str) -> std::result::Result<(), String> {
        let mode: crate::gc::ThreadedLogging = mode.parse()?;
        self.reconfigure(|c| c.threaded_logging = mode)
    }

    /// Change settings of a running cleaner: all or nothing, validated. The
    /// policy object (and what it has learnt) stays; `set_policy` replaces it.
    fn reconfigure(
        &mut self,
        change: impl FnOnce(&mut CleanerConfig),
    ) -> std::result::Result<(), String> {
        let mut c = self.config.clone();
        change(&mut c);
        c.validate()?;
        self.gate.random_write_cost = c.random_write_cost;
        self.config = c;
        Ok(())
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }
}

/// Threaded logging other than off is refused on a device that does not
/// suit it (an object store: `BlockDevice::fills_holes`), naming the
/// setting: at mkfs, at a read-write mount, and when switched.
pub fn threaded_logging_suits(
    mode: crate::gc::ThreadedLogging,
    fills_holes: bool,
) -> std::result::Result<(), String> {
    if mode == crate::gc::ThreadedLogging::Off || fills_holes {
        return Ok(());
    }
    Err(format!(
        "threaded_logging = \"{}\": not on an object store, where each hole filled \
         uploads its whole segment again; it must be \"off\" there",
        mode.name()
    ))
}

impl Lsfs {
    /// Switch threaded logging at run time (`lsfs gc threaded`), where the
    /// device suits it ([`Lsfs::check_threaded_logging`]).
    pub fn set_threaded_logging(&mut self, mode: &str) -> std::result::Result<(), String> {
        let m: crate::gc::ThreadedLogging = mode.parse()?;
        self.check_threaded_logging(m)?;
        self.cleaner.set_threaded_logging(mode)
    }

    /// [`threaded_logging_suits`] this mount's device.
    pub fn check_threaded_logging(
        &self,
        mode: crate::gc::ThreadedLogging,
    ) -> std::result::Result<(), String> {
        threaded_logging_suits(mode, self.store.device_fills_holes())
    }

    /// Free segments as a percentage of all segments.
    pub fn free_percent(&self) -> f64 {
        self.free_segments() as f64 * 100.0 / self.store.segs().nsegments() as f64
    }

    /// Free segments, counting those the last checkpoint freed, and the
    /// holes prepared for plugging as the segments they add up to: the
    /// low-water mark compares this, and without the holes a writer below
    /// it would run a pass on every write while it fills them. They are at
    /// most a segment and a victim's worth (`PLUG_HOLES_SEGMENTS`).
    pub fn free_segments(&self) -> u64 {
        let s = self.store.segs();
        s.free_count()
            + s.pending_free.len() as u64
            + self.store.plugs().holes() / self.store.geo().segment_blocks as u64
    }

    /// The low-water mark in segments: below it, writes clean in the
    /// foreground. `min_free_percent` of the device, but never less than a
    /// pass needs: the reserve (which passes leave alone), the segments the
    /// streams hold open, and room for the copies of a few victims. Without
    /// that floor a small device with a low percentage starts cleaning with
    /// no room left, each pass frees less than its checkpoint writes, and
    /// writes get ENOSPC with reclaimable space left (measured: 128 MiB,
    /// 256-block segments, 5 %).
    pub fn low_water_segments(&self) -> u64 {
        let s = &self.store;
        let pct =
            (s.segs().nsegments() * self.cleaner.config.min_free_percent as u64).div_ceil(100);
        let streams = if s.streams().enabled {
            crate::meta::stream::Stream::DATA.len() as u64
        } else {
            0
        };
        pct.max(s.reserve_segments() + streams + LOW_WATER_ROOM_SEGMENTS)
    }

    /// Background passes stop at this many free segments.
    pub fn high_water_segments(&self) -> u64 {
        let pct = (self.store.segs().nsegments() * self.cleaner.config.max_free_percent as u64)
            .div_ceil(100);
        pct.max(self.low_water_segments() + 1)
    }

    /// One cleaning pass over at most `max_victims` segments.
    ///
    /// Protection never costs copies: a dead block that only plain
    /// checkpoints see is never copied. A pass under space pressure plans
    /// its victims as if only the latest checkpoint were kept, then gives
    /// up the plain checkpoints its victims need gone, oldest first; other
    /// passes leave victims such checkpoints hold until they expire.
    pub fn clean(&mut self, max_victims: usize, reason: &str) -> Result<PassReport> {
        self.mutable().map_err(Error::Errno)?;
        let now = self.store.now();
        // Relocation must see the checkpoints the coming checkpoint keeps.
        self.store.expire_checkpoints(now);
        let picked = self.pick_victims(max_victims, reason, now);
        let rep = self.relocate_victims(picked, max_victims, reason, now)?;
        self.finish_pass(rep, reason, now)
    }

    /// The candidates of a pass, best first, more than `max_victims` (late
    /// aborts do not count).
    fn pick_victims(&mut self, max_victims: usize, reason: &str, now: u64) -> Vec<u64> {
        // Before ENOSPC reclaim fastest (greedy, as F2FS's foreground GC);
        // otherwise the configured policy.
        let pressed = pass_is_pressed(reason);
        let mut candidates = self.store.cleanable_segments_with(reason == "foreground");
        if !pressed {
            // A segment whose blocks died after the oldest kept checkpoint
            // was made may hold blocks only that checkpoint sees: it waits.
            let kept_since = self.store.oldest_kept_created_secs(now);
            candidates.retain(|c| c.nlive_lastmod_secs < kept_since);
        }
        // On an object store a victim whose object is cached costs no GET
        // (docs/OBJECT_STORE.md): the cost-benefit scores weigh that.
        // Other devices say nothing and every read costs the same.
        for c in candidates.iter_mut() {
            if self.store.segment_cached(c.segno) == Some(true) {
                c.read_cost = self.cleaner.config.cached_read_cost;
            }
        }
        // Ask for more than needed: late-aborted candidates do not count.
        // Greedy only at the last resort; below the low-water mark the
        // configured policy still chooses (policies differ most there).
        let mut picked = if reason == "foreground" {
            lsfs_policy::gc::Greedy.select_victims(&candidates, now, max_victims * 4)
        } else {
            self.cleaner
                .policy
                .select_victims(&candidates, now, max_victims * 4)
        };
        if pressed && reason != "foreground" {
            // Below the low-water mark a pass must gain space: if the
            // policy's choices do not pay for their copies, greedy's next.
            let greedy = lsfs_policy::gc::Greedy.select_victims(&candidates, now, max_victims * 4);
            let chosen: std::collections::HashSet<u64> = picked.iter().copied().collect();
            picked.extend(greedy.into_iter().filter(|s| !chosen.contains(s)));
        }
        picked
    }

    /// Plan each candidate in turn: hold it back, abort it late, plug it,
    /// or relocate what it still holds, within the pass's copy budget.
    fn relocate_victims(
        &mut self,
        picked: Vec<u64>,
        max_victims: usize,
        reason: &str,
        now: u64,
    ) -> Result<PassReport> {
        let rules = self.pass_rules(reason);
        let mut rep = PassReport {
            reason: reason.to_string(),
            ..Default::default()
        };
        let mut planned = 0u64;
        self.cleaner
            .futile
            .retain(|_, (_, at)| now < at.saturating_add(FUTILE_PLAN_SECS));
        for seg in picked {
            if rep.victims.len() >= max_victims {
                break;
            }
            // What planning and moving it reads (the victim, the DAT) is
            // the cleaner's, for a device that counts requests by cause.
            let _reads = crate::device::CleanerReads::start();
            if self
                .cleaner
                .futile
                .get(&seg)
                .is_some_and(|(c, _)| *c == self.segment_counts(seg))
            {
                continue;
            }
            let plan = self.store.relocation_plan_keeping(seg, rules.keep)?;
            rep.protected_seen += plan.protected() as u64;
            if self.hold_back_or_abort(seg, &plan, &rules, &mut rep, now) {
                continue;
            }
            if reason == "low space"
                && plan.freed_at_next_checkpoint == 0
                && self.plug_instead(seg, &plan)
            {
                // (Holes are written into before the next checkpoint: not
                // when the latest one still sees what they held.)
                self.plug_victim(plan, &mut rep)?;
                continue;
            }
            let cost = plan.blocks_written();
            if planned + cost > rules.budget {
                break;
            }
            planned += cost;
            // Relocated at once, not after the whole pass is planned: moving
            // one victim can change blocks another holds (freeing a plugged
            // victim rewrites SSA blocks that may sit in the next one).
            self.relocate_victim(plan, &mut rep)?;
        }
        Ok(rep)
    }

    /// How a pass for `reason` treats its candidates.
    fn pass_rules(&self, reason: &str) -> PassRules {
        let pressed = pass_is_pressed(reason);
        // Late abort saves copies only when there is time.
        let late_abort = !pressed;
        let seg_blocks = self.store.geo().segment_blocks as u64;
        PassRules {
            pressed,
            late_abort,
            keep: if pressed {
                KeepCheckpoints::LatestOnly
            } else {
                KeepCheckpoints::Kept
            },
            // Late abort on the true cost: the counters do not see dead
            // blocks that a kept checkpoint still needs, the plan does.
            // Under pressure, a victim must at least pay for the checkpoint
            // metadata its pass writes, or cleaning eats the reserve.
            min_gain: if late_abort {
                self.cleaner.config.min_reclaim_blocks.max(1) as i64
            } else {
                (seg_blocks as i64 / 32).max(8)
            },
            budget: self.pass_budget(reason),
        }
    }

    /// What the SUFILE counts in `seg` (blocks, live, snapshot): a futile
    /// verdict stands while they do not change.
    fn segment_counts(&self, seg: u64) -> (u32, u32, u32) {
        let u = &self.store.segs().usage[seg as usize];
        (u.nblocks, u.nlive, u.nsnapshot)
    }

    /// Leave `seg` alone if `plan` says only checkpoints hold its blocks
    /// (held back) or it gains too little (aborted late); true if it was.
    fn hold_back_or_abort(
        &mut self,
        seg: u64,
        plan: &RelocationPlan,
        rules: &PassRules,
        rep: &mut PassReport,
        now: u64,
    ) -> bool {
        if !rules.pressed && plan.held_by_checkpoints > 0 {
            // Only checkpoints hold those blocks: they free themselves
            // when the checkpoints expire, or when space runs short.
            let c = self.segment_counts(seg);
            self.cleaner.futile.insert(seg, (c, now));
            rep.held_back.push(seg);
            return true;
        }
        if plan.gain() < rules.min_gain {
            let c = self.segment_counts(seg);
            if rules.late_abort {
                self.store.reage_segment(seg);
            } else {
                self.cleaner.futile.insert(seg, (c, now));
            }
            rep.late_aborted.push(seg);
            return true;
        }
        false
    }

    /// Plug the victim `plan` was made for instead of cleaning it: preparing
    /// frees the plan's dead blocks now.
    fn plug_victim(&mut self, plan: RelocationPlan, rep: &mut PassReport) -> Result<()> {
        let seg = plan.segno;
        self.give_up_for(rep, plan.give_up_below);
        let holes = self.store.prepare_plug(plan)?;
        rep.plugged.push(seg);
        rep.holes_prepared += holes as u64;
        Ok(())
    }

    /// Relocate what the victim `plan` was made for still holds.
    fn relocate_victim(&mut self, plan: RelocationPlan, rep: &mut PassReport) -> Result<()> {
        self.give_up_for(rep, plan.give_up_below);
        if self.cleaner.config.threaded_logging != crate::gc::ThreadedLogging::Off {
            let (read, copied, freed) = clean_cost_terms(&plan);
            self.cleaner.gate.cleaned_with(read, copied, freed);
        }
        if plan.freed_giving_up_base > 0 {
            // Those blocks are gone for the latest checkpoint and the
            // plain ones before it (meta/durable_kills.rs).
            self.store.give_up_at_next_checkpoint();
        }
        if plan.freed_at_next_checkpoint > 0 {
            self.store.give_up_at_next_checkpoint();
            rep.freed_at_next_checkpoint += plan.freed_at_next_checkpoint as u64;
        }
        let r = self.store.relocate_planned(plan)?;
        rep.blocks_copied += r.copied() as u64;
        rep.blocks_reclaimed += (r.nblocks - r.copied().min(r.nblocks)) as u64;
        rep.victims.push(r);
        Ok(())
    }

    /// After the victims: write their copies ahead to their streams, end
    /// with a checkpoint when one is due, and account for the pass.
    fn finish_pass(&mut self, mut rep: PassReport, reason: &str, now: u64) -> Result<PassReport> {
        let late_abort = !pass_is_pressed(reason);
        let moved = !rep.victims.is_empty() || (!rep.late_aborted.is_empty() && late_abort);
        if !moved && rep.plugged.is_empty() {
            return Ok(rep);
        }
        if !rep.victims.is_empty() {
            let refs = self.store.write_moved_ahead()?;
            self.free_by_move_record(refs, &mut rep)?;
        }
        // The other victims are free once a checkpoint records their
        // copies: a pass does not write one of its own (each would rewrite
        // every dirty DAT and metadata block), but leaves it to the next
        // periodic one, to the writer when it needs the space
        // (`Lsfs::reserve`), or to the cache bound. A pass someone asked for
        // ends with one, as it always did.
        if moved
            && (reason == "manual"
                || self.store.pending_blocks() * 2 > self.store.cache().capacity_blocks())
        {
            self.checkpoint_for("cleaner")?;
        }
        let total: u64 = rep.victims.iter().map(|v| v.nblocks as u64).sum();
        rep.efficiency = if total == 0 {
            1.0
        } else {
            1.0 - rep.blocks_copied as f64 / total as f64
        };
        self.account_pass(&rep);
        if !rep.victims.is_empty() {
            tracing::debug!(
                "cleaner ({reason}): {} victims, {} blocks copied, efficiency {:.3}, checkpoints kept for {} s",
                rep.victims.len(),
                rep.blocks_copied,
                rep.efficiency,
                self.store.kept_window_secs(now)
            );
            if tracing::enabled!(tracing::Level::DEBUG) {
                self.log_census(&rep);
            }
        }
        self.cleaner.last_pass = Some(rep.clone());
        Ok(rep)
    }

    /// Free the victims that a move record can carry now (their copies are
    /// in the data-stream records `refs` names): the writer may reuse them
    /// without waiting for a checkpoint (meta/move_record.rs).
    fn free_by_move_record(
        &mut self,
        refs: Vec<crate::log::items::Item>,
        rep: &mut PassReport,
    ) -> Result<()> {
        if self.store.move_records_enabled() {
            let ok: Vec<&Relocated> = rep
                .victims
                .iter()
                .filter(|r| self.store.may_free_by_move_record(r))
                .collect();
            let fit = self.store.move_record_fits(&refs, ok);
            rep.freed_by_move_record = self.store.write_move_record(refs, &fit)? as u64;
        } else {
            for _ in &rep.victims {
                self.store.note_waiting_victim("a snapshot changed");
            }
        }
        for v in &mut rep.victims {
            v.moved = Vec::new();
            v.freed = Vec::new();
        }
        Ok(())
    }

    /// Where the slack is after a pass, and what its victims held: one
    /// debug line (a scan of the segment table, so only when asked for).
    fn log_census(&self, rep: &PassReport) {
        let c = self.store.segment_census();
        let streams: Vec<String> = c
            .by_stream
            .iter()
            .map(|(name, s)| {
                format!(
                    "{name} {} segs u={:.3}",
                    s.segments,
                    s.live as f64 / (s.segments * c.segment_blocks).max(1) as f64
                )
            })
            .collect();
        let victims: Vec<String> = rep
            .victims
            .iter()
            .map(|v| {
                format!(
                    "{}:{:.2}",
                    v.stream,
                    (v.live_copied + v.protected_copied) as f64 / c.segment_blocks as f64
                )
            })
            .collect();
        tracing::debug!(
            "census: free {} pending {} reserved {} chain {} partly {} dead {} live {}; {}; \
             victims (stream:utilization) {}; freed at the next checkpoint {}",
            c.free,
            c.pending_free,
            c.reserved,
            c.in_recovery_chain,
            c.partly_filled,
            c.dead_blocks(),
            c.live_blocks(),
            streams.join(", "),
            victims.join(" "),
            rep.freed_at_next_checkpoint
        );
    }

    /// Copies a pass may make: what the writer can still place (the rest of
    /// its segment and the free segments; segments freed by this or the
    /// last pass are not usable yet), less what the checkpoint that places
    /// them writes besides the copies and the DAT blocks they dirty. The
    /// pass before ENOSPC may use the reserve (that is what it is for) but
    /// for one segment, which stays for the metadata of deletes and
    /// checkpoints; other passes leave the reserve alone, or they could
    /// leave the last resort nothing to work with. Copies stay dirty in the
    /// cache until that checkpoint: at most half of it, but always one
    /// whole victim (the cache grows for it, so its bound is its size plus
    /// a segment).
    fn pass_budget(&self, reason: &str) -> u64 {
        let seg_blocks = self.store.geo().segment_blocks as u64;
        let checkpoint_blocks = 32 + self.store.segs().nblocks_sufile();
        let keep = if reason == "foreground" {
            1
        } else {
            self.store.reserve_segments()
        } + self.store.stream_segments_held();
        let room = (self.store.segs().free_count().saturating_sub(keep) * seg_blocks
            + (seg_blocks - self.store.log_head().1 as u64))
            .saturating_sub(checkpoint_blocks)
            // The same checkpoint also places what is dirty already, with
            // its metadata (as free_blocks counts it).
            .saturating_sub(self.store.pending_blocks() as u64 * 2);
        // Copies of earlier passes may still be waiting for their checkpoint.
        (self.store.cache().capacity_blocks() as u64 / 2)
            .saturating_sub(self.store.pending_blocks() as u64)
            .max(seg_blocks)
            .min(room)
    }

    /// Give up the plain checkpoints numbered below `cno` (a pass's victims
    /// need what only they see), and say so.
    fn give_up_for(&mut self, rep: &mut PassReport, cno: u64) {
        if cno == 0 {
            return;
        }
        let n = self.store.give_up_checkpoints_below(cno);
        if n == 0 {
            return;
        }
        rep.checkpoints_given_up += n as u64;
        self.cleaner.stats.checkpoints_given_up += n as u64;
        let window = self.store.kept_window_secs(self.store.now());
        let now = self.store.clock().mono();
        self.cleaner.note_window(window, now);
    }

    /// Below the low-water mark: whether to plug victim `seg` (planned as
    /// `plan`) instead of cleaning it (threaded logging, docs/CLEANER.md §5).
    /// Never when appending is short of room ([`PLUG_APPEND_ROOM_SEGMENTS`]):
    /// then only cleaning helps, and the last-resort pass before ENOSPC
    /// never plugs for that reason.
    fn plug_instead(&self, seg: u64, plan: &RelocationPlan) -> bool {
        use crate::gc::ThreadedLogging;
        let mode = self.cleaner.config.threaded_logging;
        let seg_blocks = self.store.geo().segment_blocks as u64;
        if mode == ThreadedLogging::Off
            || self.store.free_blocks_appending() <= PLUG_APPEND_ROOM_SEGMENTS * seg_blocks
            || !self.store.plug_eligible(seg)
            || plan.holds_frames
            || self.store.plugs().holes() >= PLUG_HOLES_SEGMENTS * seg_blocks
        {
            return false;
        }
        let (read, copied, freed) = clean_cost_terms(plan);
        mode == ThreadedLogging::Always
            || self
                .cleaner
                .gate
                .should_plug_cost(lsfs_policy::gc::PlugGate::cost_of(read, copied, freed))
    }

    fn account_pass(&mut self, rep: &PassReport) {
        let now = self.store.clock().mono();
        let c = &mut self.cleaner;
        c.stats.passes += 1;
        c.stats.segments_cleaned += rep.victims.len() as u64;
        c.stats.blocks_copied += rep.blocks_copied;
        c.stats.dead_blocks_copied += rep
            .victims
            .iter()
            .map(|v| v.protected_copied as u64)
            .sum::<u64>();
        c.stats.freed_at_next_checkpoint += rep.freed_at_next_checkpoint;
        c.stats.file_data_copied += rep
            .victims
            .iter()
            .map(|v| v.file_data_copied as u64)
            .sum::<u64>();
        c.stats.late_aborts += rep.late_aborted.len() as u64;
        for v in &rep.victims {
            let t = c.stats.by_stream.entry(v.stream).or_default();
            t.victims += 1;
            t.blocks += v.nblocks as u64;
            t.copied += v.copied() as u64;
        }
        let (start, n) = c.window;
        c.window = if now.saturating_sub(start).as_secs() >= 1 {
            (now, rep.blocks_copied)
        } else {
            (start, n + rep.blocks_copied)
        };
        self.refresh_cleaner_stats();
        let wa = self.write_amplification().ratio.unwrap_or(1.0);
        let c = &mut self.cleaner;
        let t = now.saturating_sub(c.started).as_secs();
        c.stats.wa_history.push((t, wa));
        if c.stats.wa_history.len() > 4096 {
            // Bounded: keep every other point.
            let h: Vec<_> = c.stats.wa_history.iter().copied().step_by(2).collect();
            c.stats.wa_history = h;
        }
    }

    /// Recompute the derived totals (write amplification, unaccounted blocks).
    pub fn refresh_cleaner_stats(&mut self) {
        let written = self.store.stats().payload_blocks_written;
        let c = &mut self.cleaner.stats;
        c.cleaner_blocks_written = c.blocks_copied;
        c.user_blocks_written = written.saturating_sub(c.blocks_copied);
        c.cleaner_amplification = if c.user_blocks_written == 0 {
            1.0
        } else {
            written as f64 / c.user_blocks_written as f64
        };
        c.file_data_written = self
            .store
            .stats()
            .blocks_by_class
            .get(crate::log::record::FILE_DATA)
            .copied()
            .unwrap_or(0);
        let user_data = c.file_data_written.saturating_sub(c.file_data_copied);
        c.file_data_cleaner_amplification = if user_data == 0 {
            1.0
        } else {
            c.file_data_written as f64 / user_data as f64
        };
        let used: u64 = self
            .store
            .segs()
            .usage
            .iter()
            .map(|u| u.nblocks as u64)
            .sum();
        // Dead blocks are unaccounted only while a plain checkpoint still
        // protects them; segments carry no counter for those, so report the
        // share of written blocks that are neither live nor snapshot-held
        // but sit in segments whose live count changed within the protection period.
        let horizon = self
            .store
            .now()
            .saturating_sub(self.store.config().protection_secs);
        let recent_dead: u64 = self
            .store
            .segs()
            .usage
            .iter()
            .filter(|u| u.nblocks > 0 && u.nlive_lastmod_secs >= horizon)
            .map(|u| {
                (u.nblocks
                    - u.nlive.min(u.nblocks)
                    - u.nsnapshot.min(u.nblocks - u.nlive.min(u.nblocks))) as u64
            })
            .sum();
        c.snapshot_changes_pending = self.store.reconcile().queue().len() as u64;
        c.checkpoints_given_up_at_checkpoint =
            self.store.stats().checkpoints_given_up_at_checkpoint;
        c.checkpoints_kept_secs = self.store.kept_window_secs(self.store.now());
        c.threaded_logging = self.store.plugs().stats().clone();
        c.holes_ready = self.store.plugs().holes();
        c.measured_clean_cost = self.cleaner.gate.measured_cost();
        c.reconcile_progress = if self.store.reconcile().is_settled() {
            1.0
        } else {
            (self.store.reconcile().cursor() as f64 / self.store.roots().next_vblock.max(1) as f64)
                .min(1.0)
        };
        c.unaccounted_fraction = if used == 0 {
            0.0
        } else {
            recent_dead as f64 / used as f64
        };
    }

    /// Background work of the cleaner; called from `tick`.
    pub(crate) fn clean_in_background(&mut self) -> Result<()> {
        if !self.cleaner.enabled || self.mutable().is_err() {
            return Ok(());
        }
        if !self.deletes.is_empty() {
            // Deleted files' blocks are still being freed: a victim now
            // would copy blocks about to die. The reclaim steps come first.
            return Ok(());
        }
        let cfg = self.cleaner.config.clone();
        let free = self.free_segments();
        let (start, copied) = self.cleaner.window;
        let clock = self.store.clock().clone();
        if clock.secs_since(start) < 1 && copied >= cfg.max_copy_blocks_per_sec {
            return Ok(()); // rate bound: foreground I/O first
        }
        let battery = self.cleaner.on_battery();
        let idle =
            cfg.idle_secs > 0 && clock.secs_since(self.cleaner.last_activity) >= cfg.idle_secs;
        let due = clock.secs_since(self.cleaner.last_check) >= cfg.check_interval_secs;
        if free < self.low_water_segments() {
            self.cleaner.last_check = clock.mono();
            self.clean(cfg.aggressive_segments_per_pass as usize, "low space")?;
        } else if free < self.high_water_segments() && !battery && (due || idle) {
            self.cleaner.last_check = clock.mono();
            self.clean(
                cfg.segments_per_pass as usize,
                if idle { "idle" } else { "interval" },
            )?;
        } else if idle
            && !battery
            && cfg.compact_when_idle
            && free >= self.high_water_segments()
            && clock.secs_since(self.compaction_last_read()) >= cfg.idle_secs
        {
            // Nothing to clean: lay out a file that is read in order
            // (fs/compaction.rs), a batch per tick.
            self.compact_step()?;
        }
        Ok(())
    }

    /// Below the low-water mark: clean in the foreground until free space
    /// is just back above it (aggressive passes), or until a pass gains
    /// nothing. The way up to the high-water mark is left to background
    /// passes (interval, idle): a writer that cleans up to it takes victims
    /// before their blocks have had time to die. No checkpoint first: the
    /// pass's copies wait in the cache, and the writer checkpoints when it
    /// needs the segments the pass freed (a checkpoint here made one per
    /// pass: on 1 GiB at 70 %, 95 checkpoints against 62 and device write
    /// amplification 1.71 against 1.64, docs/CLEANER.md).
    pub(crate) fn clean_to_low_water(&mut self) -> Result<()> {
        let cfg = self.cleaner.config.clone();
        for _ in 0..cfg.aggressive_segments_per_pass {
            if self.free_segments() > self.low_water_segments() {
                break;
            }
            let rep = self.clean(cfg.aggressive_segments_per_pass as usize, "low space")?;
            if rep.victims.is_empty() || rep.blocks_reclaimed == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Foreground cleaning before giving up with ENOSPC: passes until
    /// `need` blocks are free or a pass frees nothing.
    ///
    /// The protection period yields first: plain checkpoints inside it are
    /// given up (never snapshots) before any block they alone need is
    /// copied, since copying a block frees nothing. A write then fails only
    /// when what is left is live or held by a snapshot.
    pub(crate) fn clean_for_space(&mut self, need: u64) -> Result<bool> {
        if !self.store.reconcile().is_settled() {
            // Counters of demoted snapshots' blocks overstate what victims
            // hold: make them exact before choosing.
            self.store.reconcile_step(u64::MAX)?;
        }
        let given_up = self.store.expire_plain_checkpoints();
        if given_up > 0 {
            tracing::warn!(
                "out of space: gave up {given_up} plain checkpoints inside the protection period"
            );
            self.cleaner.stats.checkpoints_given_up += given_up as u64;
            // The first frees the segments nothing needs now, the second makes them usable.
            self.checkpoint_for("space: last resort")?;
            self.checkpoint_for("space: last resort")?;
        }
        let mut stalled = 0;
        for _ in 0..256 {
            let before = self.store.free_blocks();
            if before >= need {
                return Ok(true);
            }
            let n = self.cleaner.config.aggressive_segments_per_pass as usize;
            let rep = self.clean(n, "foreground")?;
            // Victims become free with the checkpoint after the one that moved their blocks.
            self.checkpoint_for("space: last resort")?;
            if rep.victims.is_empty() {
                break;
            }
            if self.store.free_blocks() <= before {
                stalled += 1;
                if stalled >= 2 {
                    break;
                }
            }
        }
        Ok(self.store.free_blocks() >= need)
    }
}
