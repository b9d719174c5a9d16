//! FTL simulator: page-level mapping and the FAST hybrid scheme (Lee et al. 2007), both with
//! greedy garbage collection, counting write amplification (host + copied pages over host
//! pages) and block erases. Used with the cache simulator's after-cache traces and with
//! Kang's synthetic block-utilization traces (Fig. 2-1, [`synthetic`]).

mod block_buckets;
pub mod block_trace;
mod fast;
mod page_level;
mod page_map;
pub mod synthetic;

use serde::Serialize;

pub use fast::FastFtl;
pub use page_level::PageLevelFtl;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FtlKind {
    PageLevel,
    Fast,
}

impl FtlKind {
    pub fn name(self) -> &'static str {
        match self {
            FtlKind::PageLevel => "page-level",
            FtlKind::Fast => "fast",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "page-level" | "page" => Some(FtlKind::PageLevel),
            "fast" => Some(FtlKind::Fast),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FtlGeometry {
    /// Host-visible capacity.
    pub logical_bytes: u64,
    /// Extra physical space, as a fraction of the logical capacity (Kang: 2.4 GB / 16 GB).
    pub over_provisioning: f64,
    pub page_bytes: u32,
    pub pages_per_block: u32,
    /// FAST only: log blocks (1 sequential + the rest random); `None` = all spare blocks.
    pub fast_log_blocks: Option<u64>,
}

impl FtlGeometry {
    /// Kang's FTL simulation: 16 GB with 2.4 GB (15 %) over-provisioning; 4 KiB pages in
    /// 512 KiB blocks (the block size is not stated; 128 × 4 KiB is typical for the era).
    pub fn kang() -> Self {
        Self {
            logical_bytes: 16 << 30,
            over_provisioning: 0.15,
            page_bytes: 4096,
            pages_per_block: 128,
            fast_log_blocks: None,
        }
    }

    pub fn logical_pages(&self) -> u64 {
        self.logical_bytes / self.page_bytes as u64
    }

    pub fn logical_blocks(&self) -> u64 {
        self.logical_pages().div_ceil(self.pages_per_block as u64)
    }

    /// Blocks of over-provisioned space.
    pub fn spare_blocks(&self) -> u64 {
        ((self.logical_blocks() as f64 * self.over_provisioning).round() as u64).max(2)
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FtlStats {
    pub host_pages: u64,
    pub copied_pages: u64,
    pub erases: u64,
    /// Pages the host discarded (TRIM) while they held valid data.
    pub trimmed_pages: u64,
}

impl FtlStats {
    pub fn write_amplification(&self) -> f64 {
        (self.host_pages + self.copied_pages) as f64 / self.host_pages.max(1) as f64
    }
}

/// A flash translation layer under simulation.
pub trait Ftl {
    /// The host writes logical page `lpn`.
    fn write(&mut self, lpn: u64);
    /// The host discards logical page `lpn` (TRIM): its valid copy, if any,
    /// is dropped, so garbage collection need not copy it.
    fn trim(&mut self, lpn: u64);
    fn stats(&self) -> &FtlStats;
    /// Zero the counters (after preconditioning).
    fn reset_stats(&mut self);
    /// Per-physical-block erase counts (wear).
    fn erase_counts(&self) -> &[u32];
    /// A copy of the whole device state (to precondition once and replay many traces).
    fn boxed_clone(&self) -> Box<dyn Ftl + Send + Sync>;
}

/// A device of this geometry with every logical page written once, in order.
pub fn preconditioned(kind: FtlKind, geometry: &FtlGeometry) -> Box<dyn Ftl + Send + Sync> {
    let mut ftl = build(kind, geometry);
    for lpn in 0..geometry.logical_pages() {
        ftl.write(lpn);
    }
    ftl.reset_stats();
    ftl
}

pub fn build(kind: FtlKind, geometry: &FtlGeometry) -> Box<dyn Ftl + Send + Sync> {
    match kind {
        FtlKind::PageLevel => Box::new(PageLevelFtl::new(geometry)),
        FtlKind::Fast => Box::new(FastFtl::new(geometry)),
    }
}

#[cfg(test)]
mod tests;
