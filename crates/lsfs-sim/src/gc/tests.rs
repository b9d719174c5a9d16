//! The simulator against closed-form cases and against its own lower bound.

use lsfs_policy::gc::write_cost_model::write_amplification;
use lsfs_policy::gc::PolicyKind;

use super::*;

const DISK_BLOCKS: u64 = 65_536;

fn config(policy: GcPolicy, utilization: f64, access: AccessSpec) -> GcConfig {
    let mut c = GcConfig::new(DISK_BLOCKS, utilization, policy);
    c.segment_blocks = 64;
    c.access = access;
    c.warmup_writes_per_block = 3.0;
    c.measure_writes_per_block = 3.0;
    c
}

fn hot_cold() -> AccessSpec {
    AccessSpec::HotCold {
        hot_fraction: 0.1,
        hot_write_fraction: 0.9,
    }
}

fn wa(policy: GcPolicy, utilization: f64, access: AccessSpec) -> f64 {
    simulate(&config(policy, utilization, access)).write_amplification
}

/// FIFO (timestamp) cleaning under uniform writes follows u* = exp(−(1−u*)/ρ), WA = 1/(1−u*)
/// (see `write_cost_model`). Our disk also holds the cleaner's reserve and the partly written
/// open segments, which raises the effective utilization a little: 4 % covers that at this size
/// (at 1M blocks the measured gap is 0.2 %).
#[test]
fn timestamp_under_uniform_writes_matches_the_fifo_model() {
    for rho in [0.5, 0.8] {
        let model = write_amplification(rho);
        let sim = wa(
            GcPolicy::Shared(PolicyKind::Timestamp),
            rho,
            AccessSpec::Uniform,
        );
        assert!(
            (sim / model - 1.0).abs() < 0.04,
            "rho {rho}: simulated {sim}, model {model}"
        );
    }
}

/// Greedy under uniform writes: the same model is its large-segment limit; finite segments
/// let greedy pick victims below u*, so it may beat the model by a few percent, never lose
/// by more than the reserve effect.
#[test]
fn greedy_under_uniform_writes_is_at_or_slightly_below_the_model() {
    let model = write_amplification(0.8);
    let sim = wa(
        GcPolicy::Shared(PolicyKind::Greedy),
        0.8,
        AccessSpec::Uniform,
    );
    assert!(
        sim < model * 1.03 && sim > model * 0.9,
        "simulated {sim}, model {model}"
    );
}

#[test]
fn the_oracle_never_does_worse_than_any_policy() {
    for access in [
        AccessSpec::Uniform,
        hot_cold(),
        AccessSpec::Zipf { exponent: 1.0 },
    ] {
        for rho in [0.6, 0.85] {
            let oracle = wa(GcPolicy::Oracle, rho, access.clone());
            for kind in PolicyKind::ALL {
                let policy = wa(GcPolicy::Shared(kind), rho, access.clone());
                assert!(
                    oracle <= policy,
                    "{} at {rho} ({}): oracle {oracle} > {policy}",
                    kind.name(),
                    access.label()
                );
            }
        }
    }
}

/// Rosenblum: under hot/cold writes cost-benefit beats greedy, and it does so by making the
/// segment distribution bimodal, where greedy leaves segments in the middle.
#[test]
fn cost_benefit_beats_greedy_on_hot_cold_with_a_bimodal_distribution() {
    let greedy = simulate(&config(
        GcPolicy::Shared(PolicyKind::Greedy),
        0.75,
        hot_cold(),
    ));
    let cb = simulate(&config(
        GcPolicy::Shared(PolicyKind::CostBenefit),
        0.75,
        hot_cold(),
    ));
    assert!(cb.write_amplification < greedy.write_amplification * 0.8);
    let middle = |r: &GcResult| {
        let total: u64 = r.segment_histogram.iter().sum();
        let n = r.segment_histogram.len();
        let mid: u64 = r.segment_histogram[n * 45 / 100..n * 85 / 100].iter().sum();
        mid as f64 / total as f64
    };
    let (g, c) = (middle(&greedy), middle(&cb));
    assert!(
        g > c + 0.1,
        "segments between 45 and 85 %: greedy {g}, cost-benefit {c}"
    );
}

/// Issue 3's target for our policy: WA ≤ 1.6 on 90/10 hot/cold at 80 % utilization, where
/// cost-benefit needs about 1.9.
#[test]
fn balanced_reaches_the_issue_target_on_hot_cold_at_80_percent() {
    let ours = wa(
        GcPolicy::Shared(PolicyKind::StreamBalanced),
        0.8,
        hot_cold(),
    );
    let cb = wa(GcPolicy::Shared(PolicyKind::CostBenefit), 0.8, hot_cold());
    assert!(ours <= 1.6, "balanced WA {ours}");
    assert!(ours < cb, "balanced {ours} vs cost-benefit {cb}");
}

#[test]
fn accounting_is_consistent() {
    let r = simulate(&config(
        GcPolicy::Shared(PolicyKind::Greedy),
        0.7,
        hot_cold(),
    ));
    let expected_writes = (3.0 * (0.7 * DISK_BLOCKS as f64).round()) as u64;
    assert!(r.user_writes.abs_diff(expected_writes) <= 1);
    assert!(r.write_amplification >= 1.0);
    // Write cost = WA + blocks read / user blocks, and every cleaned non-empty segment is read.
    let read_share = r.read_blocks as f64 / r.user_writes as f64;
    assert!((r.write_cost - r.write_amplification - read_share).abs() < 1e-9);
    assert!(r.read_blocks <= r.segments_cleaned * r.segment_blocks as u64);
    let victims: u64 = r.victim_histogram.iter().sum();
    assert_eq!(victims, r.segments_cleaned);
}

#[test]
fn a_seed_reproduces_a_run_exactly() {
    let c = config(
        GcPolicy::Shared(PolicyKind::CostBenefit),
        0.7,
        AccessSpec::Zipf { exponent: 0.9 },
    );
    let (a, b) = (simulate(&c), simulate(&c));
    assert_eq!(a.copied_blocks, b.copied_blocks);
    assert_eq!(a.segment_histogram, b.segment_histogram);
}

#[test]
fn sweeps_return_results_in_job_order() {
    let jobs: Vec<GcConfig> = [0.3, 0.6]
        .into_iter()
        .map(|u| {
            let mut c = config(GcPolicy::Shared(PolicyKind::Greedy), u, AccessSpec::Uniform);
            c.disk_blocks = 8192;
            c
        })
        .collect();
    let results = run_sweep(&jobs, 2, false);
    assert!(results[0].utilization < results[1].utilization);
    assert!(results[0].write_amplification < results[1].write_amplification);
}

// Threaded logging.

fn threaded(
    policy: GcPolicy,
    utilization: f64,
    access: AccessSpec,
    mode: ThreadedLogging,
) -> GcConfig {
    let mut c = config(policy, utilization, access);
    c.threaded = mode;
    c
}

/// `off` is the simulator as it was before threaded logging: these numbers were printed by
/// the commit before it (`lsfs-sim gc --disk-blocks 65536 --segment-blocks 64 --warmup 3
/// --measure 3`, seed 1).
#[test]
fn off_reproduces_the_results_from_before_threaded_logging() {
    let cases = [
        (
            PolicyKind::Greedy,
            0.85,
            hot_cold(),
            [474_444, 641_536, 10_024],
        ),
        (
            PolicyKind::CostBenefit,
            0.9,
            AccessSpec::Uniform,
            [727_287, 904_192, 14_128],
        ),
        (
            PolicyKind::StreamBalanced,
            0.9,
            hot_cold(),
            [266_508, 443_392, 6_928],
        ),
        (
            PolicyKind::Timestamp,
            0.75,
            AccessSpec::Uniform,
            [182_383, 329_728, 5_152],
        ),
    ];
    for (kind, u, access, [copied, read, cleaned]) in cases {
        let c = threaded(GcPolicy::Shared(kind), u, access, ThreadedLogging::Off);
        let r = simulate(&c);
        assert_eq!(
            [r.copied_blocks, r.read_blocks, r.segments_cleaned],
            [copied, read, cleaned],
            "{} at {u}",
            kind.name()
        );
        assert_eq!(r.plugged_blocks, 0);
        assert_eq!(r.cost, r.write_cost);
    }
}

/// With plugging, every segment's live count matches its slots and every block sits in
/// exactly one slot, checked every 2048 user writes and at the end, in every mode, with one
/// stream pair (greedy, cost-benefit) and with temperature streams (balanced).
#[test]
fn invariants_hold_with_plugging() {
    for mode in [
        ThreadedLogging::Always,
        ThreadedLogging::Adaptive,
        ThreadedLogging::PerVictim,
    ] {
        for kind in [
            PolicyKind::Greedy,
            PolicyKind::CostBenefit,
            PolicyKind::StreamBalanced,
        ] {
            for access in [hot_cold(), AccessSpec::Uniform] {
                let mut c = threaded(GcPolicy::Shared(kind), 0.95, access, mode);
                c.disk_blocks = 32_768;
                let r = log::SegmentLog::run_checked(&c, 2048);
                assert!(
                    r.plugged_blocks > 0,
                    "{} {}: nothing plugged at 95 %",
                    mode.name(),
                    kind.name()
                );
            }
        }
    }
}

/// `always` never cleans once below the low-water mark, so every measured write is plugged
/// and costs R; the cost adds R − 1 per plugged block to the write cost in every mode.
#[test]
fn plugged_blocks_cost_r_each() {
    let c = threaded(
        GcPolicy::Shared(PolicyKind::Greedy),
        0.9,
        AccessSpec::Uniform,
        ThreadedLogging::Always,
    );
    let r = simulate(&c);
    assert_eq!(r.plugged_blocks, r.user_writes);
    assert_eq!(r.copied_blocks, 0);
    assert!((r.cost - RANDOM_WRITE_COST).abs() < 1e-9, "cost {}", r.cost);
    let mut c = threaded(
        GcPolicy::Shared(PolicyKind::CostBenefit),
        0.93,
        AccessSpec::Uniform,
        ThreadedLogging::Adaptive,
    );
    c.random_write_cost = 8.0;
    let r = simulate(&c);
    assert!(r.plugged_blocks > 0 && r.plugged_blocks < r.user_writes);
    let expected = r.write_cost + 7.0 * r.plugged_fraction();
    assert!((r.cost - expected).abs() < 1e-9, "{} vs {expected}", r.cost);
}

/// Adaptive never costs more than the cheaper of off and always by more than noise (2 %),
/// below, around and above the switch point.
#[test]
fn adaptive_costs_no_more_than_the_cheaper_of_off_and_always() {
    let cases = [
        (PolicyKind::Greedy, hot_cold()),
        (PolicyKind::CostBenefit, hot_cold()),
        (PolicyKind::StreamBalanced, hot_cold()),
        (PolicyKind::Greedy, AccessSpec::Uniform),
        (PolicyKind::CostBenefit, AccessSpec::Uniform),
    ];
    for (kind, access) in cases {
        for u in [0.85, 0.92, 0.96] {
            let cost =
                |mode| simulate(&threaded(GcPolicy::Shared(kind), u, access.clone(), mode)).cost;
            let (off, always, adaptive) = (
                cost(ThreadedLogging::Off),
                cost(ThreadedLogging::Always),
                cost(ThreadedLogging::Adaptive),
            );
            assert!(
                adaptive <= off.min(always) * 1.02,
                "{} {} at {u}: adaptive {adaptive}, off {off}, always {always}",
                kind.name(),
                access.label()
            );
        }
    }
}
