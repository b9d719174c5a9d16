//! Which open segment (stream) a write goes to, per policy family.

use lsfs_policy::gc::{Temperature, TemperatureClassifier};

use super::oracle::Oracle;

pub(super) enum Placement {
    /// One stream for user writes, one for the cleaner's copies (Rosenblum, NILFS).
    UserAndCleaner,
    /// Hot and cold user streams plus hot and cold cleaner streams, classified online.
    Temperature(TemperatureClassifier),
    /// Streams by remaining lifetime, with perfect knowledge.
    Oracle(Box<Oracle>),
}

const HOT_USER: usize = 0;
const COLD_USER: usize = 1;
const HOT_CLEANER: usize = 2;
const COLD_CLEANER: usize = 3;

impl Placement {
    pub(super) fn stream_count(&self) -> usize {
        match self {
            Placement::UserAndCleaner => 2,
            Placement::Temperature(_) => 4,
            Placement::Oracle(o) => o.stream_count(),
        }
    }

    pub(super) fn temperature(&self, stream: usize) -> Temperature {
        match self {
            Placement::Temperature(_) if stream == HOT_USER || stream == HOT_CLEANER => {
                Temperature::Hot
            }
            Placement::Temperature(_) => Temperature::Cold,
            _ => Temperature::Mixed,
        }
    }

    /// `since_previous_write`: None on a block's first write. `mean_rewrite_interval`: live
    /// blocks (the simulator's clock counts user writes).
    pub(super) fn user_stream(
        &mut self,
        block: u64,
        now: u64,
        since_previous_write: Option<u64>,
        mean_rewrite_interval: f64,
    ) -> usize {
        match self {
            Placement::UserAndCleaner => 0,
            Placement::Temperature(c) => {
                match c.classify_write(since_previous_write, mean_rewrite_interval) {
                    Temperature::Hot => HOT_USER,
                    _ => COLD_USER,
                }
            }
            Placement::Oracle(o) => o.user_write(block, now),
        }
    }

    pub(super) fn cleaner_stream(
        &self,
        block: u64,
        now: u64,
        since_last_write: u64,
        mean_rewrite_interval: f64,
    ) -> usize {
        match self {
            Placement::UserAndCleaner => 1,
            Placement::Temperature(c) => {
                match c.classify_relocation(since_last_write, mean_rewrite_interval) {
                    Temperature::Hot => HOT_CLEANER,
                    _ => COLD_CLEANER,
                }
            }
            Placement::Oracle(o) => o.stream_of(block, now),
        }
    }
}
