//! yFS's aging workload (Zhang and Ghose, FAST '03 §5): a sequence of creates and deletes
//! whose file sizes are 93 % lognormal(μ = 9.357, σ = 1.318) and 7 % Pareto(κ = 133 KiB,
//! α = 1.1) bytes; a new object is a directory with probability 1/64. The paper does not give
//! the create/delete mix; we use 70 % creates (of which deletes keep the tree from growing
//! without bound once it holds `max_files`).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lsfs_policy::SplitMix64;

use crate::progress::progress_bar;

#[derive(Clone, Debug)]
pub struct Aging {
    pub operations: u64,
    pub max_files: usize,
    /// Largest file written, to keep the Pareto tail on a test disk.
    pub max_file_bytes: u64,
    /// Start from the objects an earlier run left under the root (their names are `o<N>`).
    pub resume: bool,
    /// Operations per second at most (None: unpaced).
    pub operations_per_sec: Option<f64>,
    pub seed: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct AgingReport {
    pub files_created: u64,
    pub directories_created: u64,
    pub files_deleted: u64,
    pub bytes_written: u64,
    pub elapsed_secs: f64,
}

/// Standard normal by Box–Muller.
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = rng.unit_f64().max(1e-300);
    let u2 = rng.unit_f64();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// One file size in bytes from yFS's mixture.
pub fn file_size_bytes(rng: &mut SplitMix64) -> u64 {
    if rng.unit_f64() < 0.93 {
        (9.357 + 1.318 * normal(rng)).exp() as u64
    } else {
        let u = rng.unit_f64().max(1e-12);
        (133.0 * 1024.0 / u.powf(1.0 / 1.1)) as u64
    }
}

impl Aging {
    pub fn run(&self, root: &Path, show_progress: bool) -> io::Result<AgingReport> {
        let started = std::time::Instant::now();
        let mut rng = SplitMix64::new(self.seed);
        let mut dirs: Vec<PathBuf> = vec![root.to_path_buf()];
        let mut files: Vec<PathBuf> = Vec::new();
        let mut report = AgingReport::default();
        let mut next_id = 0u64;
        if self.resume {
            next_id = scan(&mut dirs, &mut files)?;
        }
        let bar = progress_bar(self.operations, "aging", show_progress);
        let mut buf = vec![0u8; 1 << 16];
        for op in 0..self.operations {
            if let Some(rate) = self.operations_per_sec.filter(|r| *r > 0.0) {
                let due = std::time::Duration::from_secs_f64(op as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            let create = files.is_empty() || (files.len() < self.max_files && rng.below(10) < 7);
            if create {
                let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
                let path = parent.join(format!("o{next_id}"));
                next_id += 1;
                if rng.below(64) == 0 {
                    fs::create_dir(&path)?;
                    dirs.push(path);
                    report.directories_created += 1;
                } else {
                    let size = file_size_bytes(&mut rng).min(self.max_file_bytes);
                    let mut f = fs::File::create(&path)?;
                    let mut left = size;
                    while left > 0 {
                        let n = left.min(buf.len() as u64) as usize;
                        buf[..n].iter_mut().for_each(|b| *b = rng.next_u64() as u8);
                        f.write_all(&buf[..n])?;
                        left -= n as u64;
                    }
                    files.push(path);
                    report.files_created += 1;
                    report.bytes_written += size;
                }
            } else {
                let i = rng.below(files.len() as u64) as usize;
                fs::remove_file(files.swap_remove(i))?;
                report.files_deleted += 1;
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        report.elapsed_secs = started.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// Collect the directories and files under `dirs[0]` (sorted, so a seed replays the same
/// choices); returns one more than the largest `o<N>` id seen.
fn scan(dirs: &mut Vec<PathBuf>, files: &mut Vec<PathBuf>) -> io::Result<u64> {
    let mut next_id = 0u64;
    let mut i = 0;
    while i < dirs.len() {
        let mut entries: Vec<PathBuf> = fs::read_dir(&dirs[i])?
            .map(|e| e.map(|e| e.path()))
            .collect::<io::Result<_>>()?;
        entries.sort();
        for p in entries {
            let id = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('o'))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(id) = id {
                next_id = next_id.max(id + 1);
            }
            if fs::symlink_metadata(&p)?.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
        i += 1;
    }
    Ok(next_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Pareto 7 % all lie above the median, so the mixture's median is the lognormal's
    /// 0.5 / 0.93 quantile: exp(9.357 + 1.318 · 0.0945) ≈ 13.1 KB.
    #[test]
    fn file_sizes_follow_the_published_mixture() {
        let mut rng = SplitMix64::new(4);
        let mut sizes: Vec<u64> = (0..20_000).map(|_| file_size_bytes(&mut rng)).collect();
        sizes.sort_unstable();
        let median = sizes[sizes.len() / 2] as f64;
        assert!((median / 13_150.0 - 1.0).abs() < 0.05, "median {median}");
        let big = sizes.iter().filter(|&&s| s >= 133 * 1024).count() as f64 / sizes.len() as f64;
        // All 7 % Pareto draws plus the lognormal tail above 133 KiB (≈ 3 %).
        assert!(big > 0.08 && big < 0.12, "share ≥ 133 KiB: {big}");
    }

    #[test]
    fn aging_creates_and_deletes_in_a_directory() {
        let dir = std::env::temp_dir().join(format!("lsfs-aging-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let a = Aging {
            operations: 300,
            max_files: 50,
            max_file_bytes: 64 << 10,
            resume: false,
            operations_per_sec: None,
            seed: 1,
        };
        let r = a.run(&dir, false).unwrap();
        assert!(r.files_created > 50 && r.files_deleted > 0);
        let left = walk_files(&dir);
        assert_eq!(left as u64, r.files_created - r.files_deleted);
        // A resumed run deletes among the files the first one left and never reuses a name.
        let b = Aging {
            resume: true,
            seed: 2,
            ..a
        };
        let r2 = b.run(&dir, false).unwrap();
        assert!(r2.files_deleted > 0);
        assert_eq!(
            walk_files(&dir) as u64,
            left as u64 + r2.files_created - r2.files_deleted
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    fn walk_files(dir: &Path) -> usize {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| if p.is_dir() { walk_files(&p) } else { 1 })
            .sum()
    }
}
