use super::Temperature;

/// Online temperature of a block from its own history.
///
/// Signal: the time between a block's last two writes (for a user write) or since its last
/// write (for a cleaner relocation), compared with the *mean rewrite interval* of the data
/// set, i.e. live blocks / user write rate (in the simulator, whose clock counts user writes,
/// simply the live block count). A block rewritten faster than `hot_factor` × the mean is hot:
/// its write rate is above average. Under a 90/10 hot/cold workload the two classes' means
/// differ 81×, so a factor of 1 misfiles about 10 % of cold writes and almost no hot ones;
/// the cleaner then sends misfiled cold blocks, which outlive the threshold, to the cold
/// stream when it relocates them.
#[derive(Clone, Copy, Debug)]
pub struct TemperatureClassifier {
    pub hot_factor: f64,
}

impl Default for TemperatureClassifier {
    fn default() -> Self {
        Self { hot_factor: 1.0 }
    }
}

impl TemperatureClassifier {
    /// A user write; `since_previous_write` is None for a block written for the first time
    /// (new data is presumed cold until it proves otherwise).
    pub fn classify_write(
        &self,
        since_previous_write: Option<u64>,
        mean_rewrite_interval: f64,
    ) -> Temperature {
        match since_previous_write {
            Some(interval) if (interval as f64) < self.hot_factor * mean_rewrite_interval => {
                Temperature::Hot
            }
            _ => Temperature::Cold,
        }
    }

    /// A live block the cleaner moves; `since_last_write` is its current age.
    pub fn classify_relocation(
        &self,
        since_last_write: u64,
        mean_rewrite_interval: f64,
    ) -> Temperature {
        self.classify_write(Some(since_last_write), mean_rewrite_interval)
    }
}
