use super::synthetic::BlockUtilizationTrace;
use super::*;

/// A small device: 64 MiB, 15 % over-provisioning, 4 KiB pages, 32-page blocks.
fn small() -> FtlGeometry {
    FtlGeometry {
        logical_bytes: 64 << 20,
        over_provisioning: 0.15,
        page_bytes: 4096,
        pages_per_block: 32,
        fast_log_blocks: None,
    }
}

/// Fill the range sequentially, reset the counters, then replay `pages` writes of `trace`.
fn run(
    kind: FtlKind,
    g: &FtlGeometry,
    range_pages: u64,
    utilization: f64,
    writes_per_range: u64,
) -> FtlStats {
    let mut ftl = build(kind, g);
    for lpn in 0..range_pages {
        ftl.write(lpn);
    }
    ftl.reset_stats();
    let trace = BlockUtilizationTrace::new(range_pages, g.pages_per_block, utilization, 11);
    for lpn in trace.take((writes_per_range * range_pages) as usize) {
        ftl.write(lpn);
    }
    ftl.stats().clone()
}

/// Whole blocks written in sector order never leave a valid page behind in a victim, so
/// neither FTL copies anything: WAF is exactly 1 (Kang Fig. 2-1, 100 % utilization).
#[test]
fn full_block_writes_have_waf_exactly_one() {
    let g = small();
    for kind in [FtlKind::PageLevel, FtlKind::Fast] {
        let s = run(kind, &g, g.logical_pages(), 1.0, 3);
        assert_eq!(s.copied_pages, 0, "{}", kind.name());
        assert_eq!(s.write_amplification(), 1.0);
        assert!(
            s.erases > 0,
            "{}: the device must have recycled blocks",
            kind.name()
        );
    }
}

/// Lower block utilization costs more, and FAST (full merges) pays more than page-level
/// mapping: the ordering of Fig. 2-1.
#[test]
fn partial_block_writes_amplify_and_fast_amplifies_more() {
    let g = small();
    let page = run(FtlKind::PageLevel, &g, g.logical_pages(), 0.25, 3).write_amplification();
    let fast = run(FtlKind::Fast, &g, g.logical_pages(), 0.25, 3).write_amplification();
    let page_half = run(FtlKind::PageLevel, &g, g.logical_pages(), 0.5, 3).write_amplification();
    assert!(page > 1.5, "page-level at 25 %: {page}");
    assert!(fast > page, "FAST {fast} vs page-level {page}");
    assert!(page_half < page, "50 % {page_half} vs 25 % {page}");
}

/// A narrow I/O range leaves most of the device as spare room for page-level mapping.
#[test]
fn a_small_io_range_brings_page_level_waf_near_one() {
    let g = small();
    let narrow = run(FtlKind::PageLevel, &g, g.logical_pages() / 16, 0.25, 3).write_amplification();
    assert!(narrow < 1.1, "narrow range WAF {narrow}");
}

/// Page-level greedy under uniform single-page writes follows the same closed form as the
/// log-structured cleaner: WA = 1/(1−u*), u* = exp(−(1−u*)/ρ), ρ = logical / physical.
#[test]
fn page_level_random_writes_match_the_greedy_model() {
    use lsfs_policy::gc::write_cost_model::write_amplification;
    let g = FtlGeometry {
        over_provisioning: 0.25,
        ..small()
    };
    let mut ftl = build(FtlKind::PageLevel, &g);
    for lpn in 0..g.logical_pages() {
        ftl.write(lpn);
    }
    ftl.reset_stats();
    let mut rng = lsfs_policy::SplitMix64::new(5);
    for _ in 0..4 * g.logical_pages() {
        ftl.write(rng.below(g.logical_pages()));
    }
    let rho = g.logical_blocks() as f64 / (g.logical_blocks() + g.spare_blocks()) as f64;
    let model = write_amplification(rho);
    let sim = ftl.stats().write_amplification();
    assert!(
        sim < model * 1.03 && sim > model * 0.85,
        "sim {sim} model {model}"
    );
}

#[test]
fn synthetic_requests_are_sorted_pages_of_one_block() {
    let t: Vec<u64> = BlockUtilizationTrace::new(1 << 12, 32, 0.25, 1)
        .take(8 * 4)
        .collect();
    for req in t.chunks(8) {
        assert!(req.iter().all(|p| p / 32 == req[0] / 32), "{req:?}");
        assert!(req.windows(2).all(|w| w[0] < w[1]), "{req:?}");
    }
}

/// Random mixes of sequential runs, partial blocks and single pages exercise every FAST path
/// (switch, partial merge, full merge) and page-level GC; the maps must stay inverse and every
/// logical page written stays mapped.
#[test]
fn mappings_stay_consistent_under_mixed_writes() {
    let g = FtlGeometry {
        logical_bytes: 8 << 20,
        ..small()
    };
    let mut page = PageLevelFtl::new(&g);
    let mut fast = FastFtl::new(&g);
    let mut rng = lsfs_policy::SplitMix64::new(9);
    let pages = g.logical_pages();
    let ppb = g.pages_per_block as u64;
    let mut written = std::collections::HashSet::new();
    for step in 0..20_000 {
        let (start, len) = match rng.below(3) {
            0 => (rng.below(pages / ppb) * ppb, ppb),
            1 => (
                rng.below(pages / ppb) * ppb + rng.below(ppb / 2),
                1 + rng.below(ppb / 2),
            ),
            _ => (rng.below(pages), 1),
        };
        for lpn in start..(start + len).min(pages) {
            page.write(lpn);
            fast.write(lpn);
            written.insert(lpn);
        }
        if step % 500 == 0 {
            page.check_consistency().unwrap();
            fast.check_consistency().unwrap();
        }
    }
    page.check_consistency().unwrap();
    fast.check_consistency().unwrap();
    assert!(fast.stats().copied_pages > 0 && page.stats().copied_pages > 0);
    assert_eq!(page.mapped_pages(), written.len());
    assert_eq!(fast.mapped_pages(), written.len());
}

/// A trimmed page is never copied: random writes over a full device cost both FTLs copies
/// of the pages they did not write (page-level in its victims, FAST in its merges), and fewer
/// once the host has trimmed every other page (a file system that discards what it freed).
/// Trimming a page that holds nothing counts nothing.
#[test]
fn trimmed_pages_are_not_copied() {
    let g = small();
    let pages = g.logical_pages();
    for kind in [FtlKind::PageLevel, FtlKind::Fast] {
        let replay = |trim: bool| {
            let mut ftl = preconditioned(kind, &g);
            if trim {
                for lpn in (1..pages).step_by(2) {
                    ftl.trim(lpn);
                }
                assert_eq!(ftl.stats().trimmed_pages, pages / 2, "{}", kind.name());
                ftl.trim(1);
                assert_eq!(ftl.stats().trimmed_pages, pages / 2, "{}", kind.name());
            }
            let trace = BlockUtilizationTrace::new(pages, g.pages_per_block, 0.25, 11);
            for lpn in trace.take(pages as usize) {
                ftl.write(lpn);
            }
            ftl.stats().clone()
        };
        let (kept, trimmed) = (replay(false), replay(true));
        assert_eq!(kept.host_pages, trimmed.host_pages);
        assert!(
            trimmed.copied_pages < kept.copied_pages,
            "{}: {} copies with the trim, {} without",
            kind.name(),
            trimmed.copied_pages,
            kept.copied_pages
        );
    }
}
