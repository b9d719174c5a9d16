//! Synthetic before-cache traces shaped like Kang 2017 Table 2-2. Only each trace's read
//! volume, write volume and write range are published; the access structure below is our
//! model of each workload, stated so it can be argued with:
//!
//! | trace      | read MB | write MB | write range MB | structure we generate |
//! |------------|--------:|---------:|---------------:|------------------------|
//! | video      | 0.2     | 1514     | 267            | sequential 256 KiB appends cycling through the range; rare random reads |
//! | mixed      | 527     | 413      | 133            | Zipf(0.9) over 64 KiB extents; writes of 1–4 pages (SQLite) and 64 KiB runs (files), reads of 1–16 pages |
//! | fileserver | 7253    | 5880     | 14568          | whole-file writes (geometric, mean 64 KiB) at random places; 70 % of reads revisit recently written files |
//! | tpcc       | 1129    | 2358     | 15124          | 16 KiB pages, Zipf(1.0) over 1 MiB table extents, reads and writes alike |
//!
//! `scale` multiplies the volumes (not the ranges), so a scaled trace keeps its footprint.

use lsfs_policy::SplitMix64;

use crate::cache::Request;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KangWorkload {
    Video,
    Mixed,
    FileServer,
    Tpcc,
}

const MIB_PAGES: u64 = 256; // 4 KiB pages per MiB

impl KangWorkload {
    pub const ALL: [KangWorkload; 4] = [
        KangWorkload::Video,
        KangWorkload::Mixed,
        KangWorkload::FileServer,
        KangWorkload::Tpcc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KangWorkload::Video => "video",
            KangWorkload::Mixed => "mixed",
            KangWorkload::FileServer => "fileserver",
            KangWorkload::Tpcc => "tpcc",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// (read MB, write MB, write range MB) from Table 2-2.
    pub fn published_volumes_mb(self) -> (f64, f64, f64) {
        match self {
            KangWorkload::Video => (0.2, 1514.0, 267.0),
            KangWorkload::Mixed => (527.0, 413.0, 133.0),
            KangWorkload::FileServer => (7253.0, 5880.0, 14568.0),
            KangWorkload::Tpcc => (1129.0, 2358.0, 15124.0),
        }
    }

    /// A trace of 4 KiB page requests.
    pub fn generate(self, scale: f64, seed: u64) -> Vec<Request> {
        let (read_mb, write_mb, range_mb) = self.published_volumes_mb();
        let mut g = Generator {
            rng: SplitMix64::new(seed),
            range_pages: (range_mb * MIB_PAGES as f64) as u64,
            read_left: (read_mb * scale * MIB_PAGES as f64) as u64,
            write_left: (write_mb * scale * MIB_PAGES as f64) as u64,
            out: Vec::new(),
            cursor: 0,
            recent: Vec::new(),
        };
        while g.read_left + g.write_left > 0 {
            let write = g.rng.below(g.read_left + g.write_left) < g.write_left;
            match self {
                KangWorkload::Video => g.video(write),
                KangWorkload::Mixed => g.mixed(write),
                KangWorkload::FileServer => g.fileserver(write),
                KangWorkload::Tpcc => g.tpcc(write),
            }
        }
        g.out
    }
}

struct Generator {
    rng: SplitMix64,
    range_pages: u64,
    read_left: u64,
    write_left: u64,
    out: Vec<Request>,
    cursor: u64,
    /// Start pages of recent file writes (file server), bounded.
    recent: Vec<(u64, u64)>,
}

impl Generator {
    fn emit(&mut self, start: u64, pages: u64, write: bool) {
        let left = if write {
            &mut self.write_left
        } else {
            &mut self.read_left
        };
        // The caller only picks a kind with volume left, so n ≥ 1.
        let n = pages.min(*left);
        *left -= n;
        for i in 0..n {
            self.out.push(Request {
                page: (start + i) % self.range_pages,
                write,
            });
        }
    }

    fn geometric(&mut self, mean: f64) -> u64 {
        let u = self.rng.unit_f64().max(1e-12);
        ((-u.ln() * mean).ceil() as u64).max(1)
    }

    /// Zipf-like skew over `extents` equal extents: rank r has weight 1/(r+1)^s, sampled by
    /// inverting the continuous approximation of the CDF (exact enough for a shape model).
    fn zipf_extent(&mut self, extents: u64, exponent: f64) -> u64 {
        let u = self.rng.unit_f64();
        let n = extents as f64;
        let r = if (exponent - 1.0).abs() < 1e-9 {
            (n + 1.0).powf(u) - 1.0
        } else {
            let a = 1.0 - exponent;
            (((n + 1.0).powf(a) - 1.0) * u + 1.0).powf(1.0 / a) - 1.0
        };
        // Scatter ranks over the range so hot extents are not all adjacent.
        let rank = (r as u64).min(extents - 1);
        rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % extents
    }

    fn video(&mut self, write: bool) {
        if write {
            let start = self.cursor;
            self.cursor = (self.cursor + 64) % self.range_pages;
            self.emit(start, 64, true);
        } else {
            let p = self.rng.below(self.range_pages);
            self.emit(p, 1, false);
        }
    }

    fn mixed(&mut self, write: bool) {
        let extent_pages = 16;
        let extents = self.range_pages / extent_pages;
        let base = self.zipf_extent(extents, 0.9) * extent_pages;
        if write && self.rng.below(4) == 0 {
            self.emit(base, extent_pages, true);
        } else if write {
            let n = 1 + self.rng.below(4);
            let off = self.rng.below(extent_pages - n + 1);
            self.emit(base + off, n, true);
        } else {
            let n = 1 + self.rng.below(16);
            self.emit(base, n, false);
        }
    }

    fn fileserver(&mut self, write: bool) {
        if write {
            let n = self.geometric(16.0);
            let start = self.rng.below(self.range_pages);
            if self.recent.len() < 4096 {
                self.recent.push((start, n));
            } else {
                let i = self.rng.below(4096) as usize;
                self.recent[i] = (start, n);
            }
            self.emit(start, n, true);
        } else if !self.recent.is_empty() && self.rng.below(10) < 7 {
            let (start, n) = self.recent[self.rng.below(self.recent.len() as u64) as usize];
            self.emit(start, n, false);
        } else {
            let n = self.geometric(16.0);
            let start = self.rng.below(self.range_pages);
            self.emit(start, n, false);
        }
    }

    fn tpcc(&mut self, write: bool) {
        let extent_pages = 256; // 1 MiB table extents
        let extents = self.range_pages / extent_pages;
        let base = self.zipf_extent(extents, 1.0) * extent_pages;
        let page = base + 4 * self.rng.below(extent_pages / 4);
        self.emit(page, 4, write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Volumes and ranges follow Table 2-2 (scaled).
    #[test]
    fn traces_have_the_published_volumes_and_ranges() {
        for w in KangWorkload::ALL {
            let scale = 0.01;
            let t = w.generate(scale, 1);
            let (read_mb, write_mb, range_mb) = w.published_volumes_mb();
            let writes = t.iter().filter(|r| r.write).count() as f64 / MIB_PAGES as f64;
            let reads = t.iter().filter(|r| !r.write).count() as f64 / MIB_PAGES as f64;
            assert!(
                (writes - write_mb * scale).abs() <= 0.05 * write_mb * scale + 0.1,
                "{}",
                w.name()
            );
            assert!(
                (reads - read_mb * scale).abs() <= 0.05 * read_mb * scale + 0.1,
                "{}",
                w.name()
            );
            let max_page = t.iter().map(|r| r.page).max().unwrap();
            assert!(
                max_page < (range_mb * MIB_PAGES as f64) as u64,
                "{}",
                w.name()
            );
        }
    }

    #[test]
    fn video_writes_are_sequential() {
        let t = KangWorkload::Video.generate(0.001, 2);
        let w: Vec<u64> = t.iter().filter(|r| r.write).map(|r| r.page).collect();
        let sequential = w.windows(2).filter(|p| p[1] == p[0] + 1).count();
        assert!(sequential as f64 > 0.95 * (w.len() - 1) as f64);
    }
}
