//! Rohner's hot/cold small-file workload (§4.4) against any directory: `files` files of
//! `file_bytes` each; `hot_fraction` of them receive `hot_write_fraction` of the overwrites.
//! Run it on a mounted lsfs, or on ext4/btrfs on a loop device, to compare cleaners and file
//! systems under the same writes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lsfs_policy::SplitMix64;

use crate::progress::progress_bar;

#[derive(Clone, Debug)]
pub struct HotColdFiles {
    pub files: u64,
    pub file_bytes: usize,
    pub hot_fraction: f64,
    pub hot_write_fraction: f64,
    /// Overwrites after the initial creation.
    pub overwrites: u64,
    /// fsync every file write (makes each write reach the log).
    pub fsync: bool,
    pub seed: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct HotColdReport {
    pub files_created: u64,
    pub overwrites: u64,
    pub hot_overwrites: u64,
    pub bytes_written: u64,
    pub elapsed_secs: f64,
}

fn file_path(dir: &Path, i: u64) -> PathBuf {
    // 256 files per subdirectory keeps directories small on every file system.
    dir.join(format!("d{:05}", i / 256))
        .join(format!("f{i:08}"))
}

impl HotColdFiles {
    fn write_file(&self, path: &Path, rng: &mut SplitMix64, buf: &mut [u8]) -> io::Result<()> {
        // Fresh contents each time, so compressing or deduplicating layers see new data.
        for chunk in buf.chunks_mut(8) {
            let v = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        f.write_all(buf)?;
        if self.fsync {
            f.sync_data()?;
        }
        Ok(())
    }

    pub fn run(&self, dir: &Path, show_progress: bool) -> io::Result<HotColdReport> {
        assert!(self.files > 1 && self.file_bytes > 0);
        let started = std::time::Instant::now();
        let mut rng = SplitMix64::new(self.seed);
        let mut buf = vec![0u8; self.file_bytes];
        let mut report = HotColdReport::default();
        let bar = progress_bar(self.files + self.overwrites, "hot-cold", show_progress);
        for i in 0..self.files {
            if i % 256 == 0 {
                fs::create_dir_all(file_path(dir, i).parent().expect("has parent"))?;
            }
            self.write_file(&file_path(dir, i), &mut rng, &mut buf)?;
            report.files_created += 1;
            bar.inc(1);
        }
        let hot = ((self.files as f64 * self.hot_fraction).round() as u64).clamp(1, self.files - 1);
        for _ in 0..self.overwrites {
            let i = if rng.unit_f64() < self.hot_write_fraction {
                report.hot_overwrites += 1;
                rng.below(hot)
            } else {
                hot + rng.below(self.files - hot)
            };
            self.write_file(&file_path(dir, i), &mut rng, &mut buf)?;
            report.overwrites += 1;
            bar.inc(1);
        }
        bar.finish_and_clear();
        File::open(dir)?.sync_all()?;
        report.bytes_written = (report.files_created + report.overwrites) * self.file_bytes as u64;
        report.elapsed_secs = started.elapsed().as_secs_f64();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_and_skews_overwrites_to_the_hot_set() {
        let dir = std::env::temp_dir().join(format!("lsfs-hotcold-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let w = HotColdFiles {
            files: 300,
            file_bytes: 100,
            hot_fraction: 0.1,
            hot_write_fraction: 0.9,
            overwrites: 2000,
            fsync: false,
            seed: 3,
        };
        let r = w.run(&dir, false).unwrap();
        assert_eq!(r.files_created, 300);
        assert!((r.hot_overwrites as f64 / 2000.0 - 0.9).abs() < 0.03);
        assert_eq!(fs::metadata(file_path(&dir, 299)).unwrap().len(), 100);
        assert_eq!(r.bytes_written, 2300 * 100);
        fs::remove_dir_all(&dir).unwrap();
    }
}
