//! Small-file overwrite workloads against any directory: `files` files of `file_bytes` each are
//! created, then overwritten in place `overwrites` times, the file chosen by an access pattern
//! ([`AccessSpec`]): Rohner's hot/cold (§4.4: 10 % of the files receive 90 % of the writes),
//! uniform, or Zipf. Run it on a mounted lsfs, or on ext4/btrfs on a loop device, to compare
//! cleaners and file systems under the same writes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use lsfs_policy::SplitMix64;

use crate::access::{Access, AccessSpec};
use crate::progress::progress_bar;

#[derive(Clone, Debug)]
pub struct SmallFiles {
    pub files: u64,
    pub file_bytes: usize,
    /// Which file each overwrite goes to (file ids 0..files; hot/cold's hot set is the lowest ids).
    pub access: AccessSpec,
    /// Overwrites after the initial creation.
    pub overwrites: u64,
    /// fsync every file write (makes each write reach the log).
    pub fsync: bool,
    /// The files exist already (an earlier run made them): skip the creation pass.
    pub existing: bool,
    /// Overwrites per second at most (None: as fast as the file system takes them). Leaves the
    /// file system's background work time, as real workloads do.
    pub overwrites_per_sec: Option<f64>,
    pub seed: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct SmallFilesReport {
    pub access: String,
    pub files_created: u64,
    pub overwrites: u64,
    /// Overwrites that went to the 10 % most-written files (by construction of the pattern).
    pub top_decile_overwrites: u64,
    pub bytes_written: u64,
    pub elapsed_secs: f64,
}

pub fn file_path(dir: &Path, i: u64) -> PathBuf {
    // 256 files per subdirectory keeps directories small on every file system.
    dir.join(format!("d{:05}", i / 256))
        .join(format!("f{i:08}"))
}

impl SmallFiles {
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

    pub fn run(&self, dir: &Path, show_progress: bool) -> io::Result<SmallFilesReport> {
        assert!(self.files > 1 && self.file_bytes > 0);
        let started = std::time::Instant::now();
        let mut rng = SplitMix64::new(self.seed);
        let mut access = Access::new(&self.access, self.files, self.seed ^ 0xACCE55);
        let mut buf = vec![0u8; self.file_bytes];
        let mut report = SmallFilesReport {
            access: self.access.label(),
            ..Default::default()
        };
        let creates = if self.existing { 0 } else { self.files };
        let bar = progress_bar(creates + self.overwrites, "small-files", show_progress);
        for i in 0..creates {
            if i % 256 == 0 {
                fs::create_dir_all(file_path(dir, i).parent().expect("has parent"))?;
            }
            self.write_file(&file_path(dir, i), &mut rng, &mut buf)?;
            report.files_created += 1;
            bar.inc(1);
        }
        let top_decile = (self.files / 10).max(1);
        let paced_from = std::time::Instant::now();
        for n in 0..self.overwrites {
            if let Some(rate) = self.overwrites_per_sec.filter(|r| *r > 0.0) {
                let due = std::time::Duration::from_secs_f64(n as f64 / rate);
                if let Some(wait) = due.checked_sub(paced_from.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            let i = access.next_block();
            debug_assert!(i < self.files);
            report.top_decile_overwrites += u64::from(i < top_decile);
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

    fn run_in_temp(access: AccessSpec, tag: &str) -> SmallFilesReport {
        let dir = std::env::temp_dir().join(format!("lsfs-small-{tag}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let w = SmallFiles {
            files: 300,
            file_bytes: 100,
            access,
            overwrites: 4000,
            fsync: false,
            existing: false,
            overwrites_per_sec: None,
            seed: 3,
        };
        let r = w.run(&dir, false).unwrap();
        assert_eq!(r.files_created, 300);
        assert_eq!(fs::metadata(file_path(&dir, 299)).unwrap().len(), 100);
        assert_eq!(r.bytes_written, 4300 * 100);
        fs::remove_dir_all(&dir).unwrap();
        r
    }

    #[test]
    fn existing_files_are_only_overwritten() {
        let dir = std::env::temp_dir().join(format!("lsfs-small-existing-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut w = SmallFiles {
            files: 50,
            file_bytes: 10,
            access: AccessSpec::Uniform,
            overwrites: 0,
            fsync: false,
            existing: false,
            overwrites_per_sec: None,
            seed: 1,
        };
        assert_eq!(w.run(&dir, false).unwrap().files_created, 50);
        w.existing = true;
        w.overwrites = 100;
        w.overwrites_per_sec = Some(1000.0);
        let r = w.run(&dir, false).unwrap();
        assert_eq!((r.files_created, r.overwrites), (0, 100));
        // Paced: 100 overwrites at 1000/s take at least 99 ms.
        assert!(r.elapsed_secs >= 0.099, "{}", r.elapsed_secs);
        assert_eq!(r.bytes_written, 1000);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hot_cold_skews_overwrites_to_the_hot_set() {
        let r = run_in_temp(
            AccessSpec::HotCold {
                hot_fraction: 0.1,
                hot_write_fraction: 0.9,
            },
            "hc",
        );
        assert!((r.top_decile_overwrites as f64 / 4000.0 - 0.9).abs() < 0.03);
    }

    #[test]
    fn uniform_spreads_and_zipf_concentrates() {
        let u = run_in_temp(AccessSpec::Uniform, "u");
        assert!((u.top_decile_overwrites as f64 / 4000.0 - 0.1).abs() < 0.03);
        // Zipf(1) over 300 files: the top 30 ranks hold H_30 / H_300 ≈ 0.64 of the writes.
        let z = run_in_temp(AccessSpec::Zipf { exponent: 1.0 }, "z");
        assert!((z.top_decile_overwrites as f64 / 4000.0 - 0.64).abs() < 0.04);
    }
}
