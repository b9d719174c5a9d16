//! Threaded logging's choice, victim by victim: plug the holes of a segment the policy
//! picked, or clean it. Shared by the engine's cleaner and the GC simulator.
//!
//! Costs are in sequential block writes: an appended block costs 1, a block written into a
//! hole (a random write) costs R. Getting a free slot by cleaning a victim that holds `live`
//! of `written` blocks costs reading it (`written`) plus copying `live`, for `written − live`
//! freed slots, so one appended user block costs
//!
//! ```text
//! C_clean = 1 + (written + live) / (written − live) = 2 / (1 − u)    (u = live / written)
//! ```
//!
//! and plugging pays when R < C_clean, i.e. for victims above u = 1 − 2/R (0.81 for the
//! R = 10.6 measured on this project's disk; docs/CLEANER.md §5).
//!
//! That comparison alone locks itself in under skewed writes: hot writes plugged into the old,
//! nearly full cold segments that cost-benefit picks undo the hot/cold separation, victims stay
//! expensive and plugging spreads. So the gate also asks that R be below the measured cost of
//! the victims recently cleaned, C̄ = 1 + Σ(read + copied) / Σ freed, each victim's share
//! decayed by [`CLEAN_COST_DECAY`] per later victim: the more is plugged, the cheaper the
//! cleaned victims look, and plugging backs off (negative feedback).

/// R measured on this project's disk: fio, direct I/O, 4 KiB random writes at 19,144
/// blocks/s against 1 MiB sequential writes at 203,472 blocks/s (docs/CLEANER.md §5;
/// re-measure with `docs/bench/threaded-logging/measure-r.sh`).
pub const RANDOM_WRITE_COST: f64 = 203_472.0 / 19_144.0;

/// Weight of the past in the measured cleaning cost, per cleaned victim (a memory of about a
/// hundred victims).
pub const CLEAN_COST_DECAY: f64 = 0.99;

/// The plug-or-clean decision and the cleaning cost it has measured.
#[derive(Clone, Debug)]
pub struct PlugGate {
    /// R: what a block written into a hole costs, in sequential block writes.
    pub random_write_cost: f64,
    /// Without the measured gate (the per-victim comparison alone), for comparison.
    pub per_victim_only: bool,
    cleaned_cost_blocks: f64,
    cleaned_freed_slots: f64,
}

impl PlugGate {
    pub fn new(random_write_cost: f64, per_victim_only: bool) -> PlugGate {
        PlugGate {
            random_write_cost,
            per_victim_only,
            cleaned_cost_blocks: 0.0,
            cleaned_freed_slots: 0.0,
        }
    }

    /// C_clean of one victim: what each slot cleaning it frees costs.
    pub fn clean_cost(written: u64, live: u64) -> f64 {
        let read = if live > 0 { written } else { 0 };
        Self::cost_of(read, live, written.saturating_sub(live))
    }

    /// C_clean from what cleaning a victim reads, copies and frees. An engine knows more
    /// than the simulator's model: its copies include the metadata the moves rewrite (in
    /// lsfs, DAT blocks), and they take free space too, so `freed` is net of them.
    pub fn cost_of(read: u64, copied: u64, freed: u64) -> f64 {
        1.0 + (read + copied) as f64 / freed.max(1) as f64
    }

    /// C̄: the decayed cost of the victims cleaned so far; 0 before any (no evidence yet that
    /// cleaning is dear, so nothing is plugged until some victim has been cleaned).
    pub fn measured_cost(&self) -> f64 {
        if self.cleaned_freed_slots > 0.0 {
            1.0 + self.cleaned_cost_blocks / self.cleaned_freed_slots
        } else {
            0.0
        }
    }

    /// Whether a victim holding `live` of `written` blocks is cheaper to plug than to clean.
    pub fn should_plug(&self, written: u64, live: u64) -> bool {
        self.should_plug_cost(Self::clean_cost(written, live))
    }

    /// Whether a victim whose cleaning costs `clean_cost` per freed slot
    /// ([`Self::cost_of`]) is cheaper to plug.
    pub fn should_plug_cost(&self, clean_cost: f64) -> bool {
        let r = self.random_write_cost;
        let gate = self.per_victim_only || r < self.measured_cost();
        r < clean_cost && gate
    }

    /// A victim holding `live` of `written` blocks was cleaned: add it to C̄.
    pub fn cleaned(&mut self, written: u64, live: u64) {
        let read = if live > 0 { written } else { 0 };
        self.cleaned_with(read, live, written.saturating_sub(live));
    }

    /// A victim was cleaned, reading `read`, copying `copied` and freeing `freed` blocks
    /// ([`Self::cost_of`]): add it to C̄.
    pub fn cleaned_with(&mut self, read: u64, copied: u64, freed: u64) {
        self.cleaned_cost_blocks =
            self.cleaned_cost_blocks * CLEAN_COST_DECAY + (read + copied) as f64;
        self.cleaned_freed_slots =
            self.cleaned_freed_slots * CLEAN_COST_DECAY + freed.max(1) as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_point_is_one_minus_two_over_r() {
        let mut g = PlugGate::new(10.0, true);
        // u = 1 − 2/10 = 0.8: below it clean, above it plug.
        assert!(!g.should_plug(100, 79));
        assert!(g.should_plug(100, 81));
        g.per_victim_only = false;
        assert!(!g.should_plug(100, 95), "nothing cleaned yet: no evidence");
        g.cleaned(100, 90);
        assert!(g.measured_cost() > 10.0);
        assert!(g.should_plug(100, 95));
        for _ in 0..1000 {
            g.cleaned(100, 10);
        }
        assert!(g.measured_cost() < 10.0);
        assert!(!g.should_plug(100, 95), "cheap cleaning closes the gate");
    }
}
