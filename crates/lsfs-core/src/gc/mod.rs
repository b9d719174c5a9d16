//! The cleaner: picks victim segments with a policy from `lsfs-policy` (the
//! same code the simulator runs), relocates what they still hold, and frees
//! them. It runs in the background when free space falls below a threshold,
//! during idle periods, more eagerly on AC power, and in the foreground as
//! the last resort before ENOSPC.

pub mod census;
pub mod plug;
pub mod relocate;
pub mod victim_reads;

use crate::meta::store::Store;
pub use lsfs_policy::gc::{PolicyKind, SegmentUsage, SelectionPolicy};
use serde::{Deserialize, Serialize};

/// Defines a configuration enum spelt in lower case in lsfs.toml and on the
/// control socket: serde's names, `FromStr` (whose error names the setting
/// and every valid value), `name` and `Display`.
macro_rules! config_enum {
    ($(#[$m:meta])* $name:ident, $setting:literal { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<$name, String> {
                $name::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<_> = $name::ALL.iter().map(|v| v.name()).collect();
                    format!("{} = {s:?}: one of {}", $setting, names.join(", "))
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

config_enum!(
    /// Whether background cleaning counts the machine as on battery.
    PowerMode, "cleaner.power" {
        /// Ask the front end's [`PowerSource`].
        Auto = "auto",
        Ac = "ac",
        Battery = "battery",
    }
);

config_enum!(
    /// Threaded logging (docs/CLEANER.md §5).
    ThreadedLogging, "cleaner.threaded_logging" {
        Off = "off",
        /// A victim whose holes are cheaper to write into than to free by
        /// cleaning is plugged.
        Adaptive = "adaptive",
        /// Every victim that can be plugged is, under pressure.
        Always = "always",
    }
);

/// `policy` in lsfs.toml and on the control socket: the policy's name.
/// (`PolicyKind` is `lsfs-policy`'s, which has no serde.)
mod policy_name {
    use super::PolicyKind;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(k: &PolicyKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PolicyKind, D::Error> {
        super::parse_policy(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// A policy by name; the error names the setting and every valid name.
pub fn parse_policy(name: &str) -> Result<PolicyKind, String> {
    PolicyKind::from_name(name).ok_or_else(|| {
        let names: Vec<_> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
        format!("cleaner.policy = {name:?}: one of {}", names.join(", "))
    })
}

/// Cleaner settings (`[cleaner]` in lsfs.toml), in the spirit of
/// `nilfs_cleanerd.conf`. Ranges are checked by [`CleanerConfig::validate`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CleanerConfig {
    /// Victim selection: timestamp, greedy, cost-benefit, cost-hotness, balanced.
    #[serde(with = "policy_name")]
    pub policy: PolicyKind,
    /// Clean when free segments drop below this percentage (1..=50; default 5),
    /// or below what a pass needs to work with on a small device
    /// ([`crate::fs::Lsfs::low_water_segments`]).
    pub min_free_percent: u32,
    /// Stop background cleaning at this percentage (min..=90; default 10).
    pub max_free_percent: u32,
    /// Seconds between background checks (1..=3600; default 5).
    pub check_interval_secs: u64,
    /// Victims per background pass (1..=64; default 2).
    pub segments_per_pass: u32,
    /// Victims per pass when free space is below `min_free_percent` (1..=256; default 32).
    pub aggressive_segments_per_pass: u32,
    /// Seconds without file-system requests that count as idle (0 = never idle-clean; ..=3600; default 2).
    pub idle_secs: u64,
    /// Late abort: a victim that would reclaim fewer blocks than this is re-aged, not copied (0..=65536; default 16).
    pub min_reclaim_blocks: u32,
    /// Segments changed more recently than this are not cleaned (0..=86400; default 0).
    pub min_quiet_secs: u64,
    /// "auto" (ask the front end's [`PowerSource`]; the `lsfs` binary reads
    /// /sys/class/power_supply), "ac" or "battery".
    pub power: PowerMode,
    /// Blocks the cleaner may copy per second, so foreground I/O is never starved (64..=10^7; default 25600 = 100 MiB/s).
    pub max_copy_blocks_per_sec: u64,
    /// Threaded logging (docs/CLEANER.md §5): "off" (default); "adaptive"
    /// (below the low-water mark, a victim whose holes are cheaper to write
    /// into than to free by cleaning is plugged, by the simulator's gate
    /// with the engine's costs); "always" (every victim that can be plugged
    /// is, under pressure; for tests and measurements). Off by default:
    /// adaptive cut the write cost by 11–20 % from 77 % to 86 % live, but
    /// more than doubled it at 88 %.
    pub threaded_logging: ThreadedLogging,
    /// Compaction (Janda) when idle: files read in order are laid out
    /// again in file order, a batch per tick, while nothing else wants the
    /// device and free space is above `max_free_percent` (fs/compaction.rs;
    /// default true).
    pub compact_when_idle: bool,
    /// R: what a block written into a hole costs, in sequential block
    /// writes (1..=1000; default 10.6, measured with fio on this project's
    /// disk: docs/bench/threaded-logging/measure-r.sh). Plugging pays for
    /// victims more than 1 − 2/R live.
    pub random_write_cost: f64,
    /// On an object store: what reading a victim whose object a cache
    /// holds (no GET) costs in the cost-benefit scores, next to 1 for
    /// one that must be fetched whole (0.01..=1; default 0.1; 1 weighs
    /// them alike, as on a disk). Devices that do not say what is cached
    /// (files, disks) are not affected.
    pub cached_read_cost: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            // Measured best on every workload (docs/CLEANER.md): it keeps
            // hot data a generous share of the space and packs cold data.
            policy: PolicyKind::StreamBalanced,
            // Measured (docs/CLEANER.md §4): free segments are space the
            // cleaner cannot choose from, so NILFS's 10 % / 20 % pack the
            // used segments tighter and raise the write amplification.
            min_free_percent: 5,
            max_free_percent: 10,
            check_interval_secs: 5,
            segments_per_pass: 2,
            // Every pass ends with a checkpoint, which rewrites the dirty
            // inode and DAT blocks: fewer, larger passes write less.
            aggressive_segments_per_pass: 32,
            idle_secs: 2,
            min_reclaim_blocks: 16,
            min_quiet_secs: 0,
            power: PowerMode::Auto,
            max_copy_blocks_per_sec: 25_600,
            threaded_logging: ThreadedLogging::Off,
            compact_when_idle: true,
            random_write_cost: lsfs_policy::gc::RANDOM_WRITE_COST,
            cached_read_cost: lsfs_policy::gc::CACHED_READ_COST,
        }
    }
}

fn range<T: PartialOrd + std::fmt::Display>(name: &str, v: T, lo: T, hi: T) -> Result<(), String> {
    if v < lo || v > hi {
        return Err(format!(
            "cleaner.{name} = {v} is outside its valid range {lo}..={hi}"
        ));
    }
    Ok(())
}

impl CleanerConfig {
    pub fn validate(&self) -> Result<(), String> {
        range("min_free_percent", self.min_free_percent, 1, 50)?;
        range(
            "max_free_percent",
            self.max_free_percent,
            self.min_free_percent,
            90,
        )?;
        range("check_interval_secs", self.check_interval_secs, 1, 3600)?;
        range("segments_per_pass", self.segments_per_pass, 1, 64)?;
        range(
            "aggressive_segments_per_pass",
            self.aggressive_segments_per_pass,
            1,
            256,
        )?;
        range("idle_secs", self.idle_secs, 0, 3600)?;
        range("min_reclaim_blocks", self.min_reclaim_blocks, 0, 65536)?;
        range("min_quiet_secs", self.min_quiet_secs, 0, 86400)?;
        range(
            "max_copy_blocks_per_sec",
            self.max_copy_blocks_per_sec,
            64,
            10_000_000,
        )?;
        if !(1.0..=1000.0).contains(&self.random_write_cost) {
            return Err(format!(
                "cleaner.random_write_cost = {} is outside its valid range 1..=1000",
                self.random_write_cost
            ));
        }
        if !(0.01..=1.0).contains(&self.cached_read_cost) {
            return Err(format!(
                "cleaner.cached_read_cost = {} is outside its valid range 0.01..=1",
                self.cached_read_cost
            ));
        }
        Ok(())
    }

    pub fn policy(&self) -> Box<dyn SelectionPolicy> {
        self.policy.build(self.min_quiet_secs)
    }
}

/// Where the cleaner learns whether the machine runs on battery when
/// `power = "auto"`. The engine reads no system state itself: the front end
/// (the `lsfs` binary reads /sys/class/power_supply) passes its reading in
/// with [`crate::fs::Cleaner::set_power_source`], and tests and simulations
/// stay deterministic with the default, [`FixedPower::AC`].
pub trait PowerSource: Send + Sync {
    fn on_battery(&self) -> bool;
}

/// A power state that does not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPower {
    pub battery: bool,
}

impl FixedPower {
    pub const AC: FixedPower = FixedPower { battery: false };
    pub const BATTERY: FixedPower = FixedPower { battery: true };
}

impl PowerSource for FixedPower {
    fn on_battery(&self) -> bool {
        self.battery
    }
}

/// Whether the cleaner should count the machine as on battery: the
/// configured state, or, for `power = "auto"`, what `source` reports.
pub fn on_battery(cfg: &CleanerConfig, source: &dyn PowerSource) -> bool {
    match cfg.power {
        PowerMode::Ac => false,
        PowerMode::Battery => true,
        PowerMode::Auto => source.on_battery(),
    }
}

/// One cleaning pass, as `lsfs gc run` and the logs report it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PassReport {
    pub victims: Vec<relocate::Relocated>,
    /// Victims re-aged by late abort instead of copied.
    pub late_aborted: Vec<u64>,
    /// Victims prepared for plugging instead of cleaned (threaded logging),
    /// and the holes they offer.
    pub plugged: Vec<u64>,
    pub holes_prepared: u64,
    pub blocks_copied: u64,
    pub blocks_reclaimed: u64,
    /// Dead blocks in the examined victims that a kept checkpoint or a snapshot still needs.
    pub protected_seen: u64,
    /// Victims left alone because plain checkpoints alone hold some of
    /// their dead blocks (passes without space pressure never copy those).
    pub held_back: Vec<u64>,
    /// Plain checkpoints given up so that the victims' dead blocks could be
    /// freed instead of copied (passes under space pressure).
    pub checkpoints_given_up: u64,
    /// Dead blocks freed, not copied, although the latest checkpoint still
    /// sees them (they died since): the victims wait for the next
    /// checkpoint anyway, and it gives up the plain checkpoints before it
    /// (passes under space pressure).
    pub freed_at_next_checkpoint: u64,
    /// Victims free at once, by the pass's move record, rather than at
    /// the next checkpoint (meta/move_record.rs).
    pub freed_by_move_record: u64,
    /// E = 1 − copied / total blocks of the victims.
    pub efficiency: f64,
    pub reason: String,
}

/// What the cleaner did to the segments of one stream.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StreamCleaning {
    pub victims: u64,
    /// Blocks the victims held.
    pub blocks: u64,
    /// Blocks copied out of them (live, protected, DAT).
    pub copied: u64,
}

/// Totals since mount.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CleanerStats {
    pub passes: u64,
    pub segments_cleaned: u64,
    pub blocks_copied: u64,
    /// Of the blocks copied, dead ones something still needed: a snapshot,
    /// or a kept plain checkpoint.
    pub dead_blocks_copied: u64,
    /// Dead blocks passes under space pressure freed that the latest
    /// checkpoint still saw ([`PassReport::freed_at_next_checkpoint`]).
    pub freed_at_next_checkpoint: u64,
    /// Plain checkpoints the checkpoint after such a pass gave up.
    pub checkpoints_given_up_at_checkpoint: u64,
    pub late_aborts: u64,
    /// Plain checkpoints given up inside the protection period, oldest
    /// first, so that no block only they see was ever copied.
    pub checkpoints_given_up: u64,
    /// How far back plain checkpoints are kept now, in seconds (the
    /// protection period at most; space pressure shrinks it).
    pub checkpoints_kept_secs: u64,
    /// Threaded logging: segments plugged instead of cleaned, holes, and
    /// user blocks written into them (meta/plug.rs).
    pub threaded_logging: crate::meta::plug::PlugStats,
    /// Holes prepared and not yet used.
    pub holes_ready: u64,
    /// The plug gate's measured cost of the victims cleaned (C̄, in
    /// sequential block writes per freed slot; 0 before any).
    pub measured_clean_cost: f64,
    /// Payload blocks the log wrote that were not cleaner copies (file
    /// data and every kind of metadata).
    pub user_blocks_written: u64,
    /// Blocks the cleaner copied.
    pub cleaner_blocks_written: u64,
    /// (user + cleaner) / user: what the cleaner's copies add to the log's
    /// payload writes. Not the device's write amplification (that is
    /// `Lsfs::write_amplification`): metadata counts here as user writes,
    /// and record headers and superblocks not at all.
    pub cleaner_amplification: f64,
    /// File-data blocks written (by writes and by the cleaner).
    pub file_data_written: u64,
    /// File-data blocks the cleaner copied.
    pub file_data_copied: u64,
    /// What the cleaner adds to file data alone, Rohner's and the
    /// simulator's write amplification: written / (written − copied).
    /// `cleaner_amplification` counts metadata among the user writes, so
    /// more metadata lowers it.
    pub file_data_cleaner_amplification: f64,
    /// Fraction of written blocks whose state no counter tracks (dead, protected only by a plain checkpoint).
    pub unaccounted_fraction: f64,
    /// Snapshot promotions and demotions not yet applied to every segment
    /// counter (meta/reconcile.rs); 0 means `nsnapshot` is exact.
    pub snapshot_changes_pending: u64,
    /// How far reconciliation of the oldest pending change has gone (0..=1).
    pub reconcile_progress: f64,
    /// Victims and copies by the stream that wrote the victim.
    pub by_stream: std::collections::BTreeMap<&'static str, StreamCleaning>,
    /// (seconds since mount, device bytes / application bytes so far), one
    /// point per pass.
    pub wa_history: Vec<(u64, f64)>,
}

impl Store {
    /// Segments the cleaner may take: written, closed, not reserved for the
    /// writer, not already freed, not part of the recovery chain, and not
    /// prepared for plugging.
    pub fn cleanable_segments(&self) -> Vec<SegmentUsage> {
        self.cleanable_segments_with(false)
    }

    /// [`Store::cleanable_segments`], with the segments prepared for
    /// plugging if `plug_targets` (the last resort before ENOSPC: they are
    /// the emptiest, and their holes take user data only, never the
    /// metadata that needs free segments).
    pub fn cleanable_segments_with(&self, plug_targets: bool) -> Vec<SegmentUsage> {
        let chain_from = self.recovery_chain_from();
        (0..self.segs().nsegments())
            .filter(|&s| {
                let u = &self.segs().usage[s as usize];
                u.nblocks > 0
                    && !self.segs().reserved.contains(&s)
                    && !self.segs().pending_free.contains(&s)
                    && self.segs().last_seq[s as usize] < chain_from
                    // Prepared for plugging: its holes are about to be used.
                    && (plug_targets || !self.plugs().is_target(s))
            })
            .map(|s| {
                let u = &self.segs().usage[s as usize];
                SegmentUsage {
                    segno: s,
                    nblocks: u.nblocks,
                    // What must be copied: live and snapshot-protected blocks.
                    nlive: u.nlive + u.nsnapshot,
                    nsnapshot: u.nsnapshot,
                    lastmod_secs: u.lastmod_secs,
                    nlive_lastmod_secs: u.nlive_lastmod_secs,
                    temperature: crate::meta::stream::Stream::from_flags(u.flags).temperature(),
                    read_cost: lsfs_policy::gc::READ_COST,
                }
            })
            .collect()
    }

    /// A 512-bin histogram of the utilization (nlive / segment size) of used segments.
    pub fn utilization_histogram(&self) -> Vec<u64> {
        let mut h = vec![0u64; 512];
        for u in self.segs().usage.iter().filter(|u| u.nblocks > 0) {
            let f = u.nlive as f64 / self.geo().segment_blocks as f64;
            h[((f * 512.0) as usize).min(511)] += 1;
        }
        h
    }
}
