//! The closed-form cleaning model for uniform random overwrites of single blocks.
//!
//! A segment written full at time 0 keeps each block alive with probability e^(−t/D) after t
//! user writes (D = live blocks, writes uniform over them). With FIFO (timestamp) cleaning,
//! and with greedy cleaning in the limit of large segments, every segment is cleaned after the
//! log has wrapped once: P·(1 − u*) user writes, P = physical blocks. So the victim's
//! utilization u* solves
//!
//! ```text
//! u* = exp(−(1 − u*) / ρ),   ρ = D / P (disk utilization)
//! ```
//!
//! (Robinson 1996; Desnoyers 2012; the same fixed point as (u − 1)/ln u = ρ). Then
//! write amplification WA = 1 / (1 − u*) and Rosenblum's write cost = 2 / (1 − u*).
//! Greedy with finite segments does slightly better than this (variance between segments
//! helps it), FIFO matches it at any segment size.

use std::sync::OnceLock;

/// u* for disk utilization `rho` in (0, 1): the non-trivial root of u = exp(−(1−u)/ρ).
pub fn victim_utilization(rho: f64) -> f64 {
    assert!(
        rho > 0.0 && rho < 1.0,
        "utilization must be in (0, 1), got {rho}"
    );
    // g(u) = u − exp(−(1−u)/ρ) is negative below u* and positive between u* and 1.
    let (mut lo, mut hi) = (0.0f64, 1.0 - 1e-12);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid - (-(1.0 - mid) / rho).exp() < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Write amplification (user + copied blocks) / user blocks under the model.
pub fn write_amplification(rho: f64) -> f64 {
    1.0 / (1.0 - victim_utilization(rho))
}

/// Rosenblum's write cost for cleaning segments at utilization `u`: read the whole segment,
/// write its live part and the new data, per block of new data. 1 when u = 0 (nothing read).
pub fn rosenblum_write_cost(u: f64) -> f64 {
    if u <= 0.0 {
        1.0
    } else {
        2.0 / (1.0 - u)
    }
}

const TABLE_STEPS: usize = 4096;
/// Utilizations above this are treated as this (WA ≈ 100): a pool cannot usefully run fuller.
pub const RHO_MAX: f64 = 0.99;

/// [`write_amplification`] by table lookup with linear interpolation; for policies that
/// evaluate it thousands of times per decision. `rho` is clamped to (0, [`RHO_MAX`]].
pub fn write_amplification_fast(rho: f64) -> f64 {
    static TABLE: OnceLock<Vec<f64>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (0..=TABLE_STEPS)
            .map(|i| {
                let rho = (i as f64 / TABLE_STEPS as f64 * RHO_MAX).max(1e-6);
                write_amplification(rho)
            })
            .collect()
    });
    let x = rho.clamp(0.0, RHO_MAX) / RHO_MAX * TABLE_STEPS as f64;
    let i = (x.floor() as usize).min(TABLE_STEPS - 1);
    let frac = x - i as f64;
    table[i] * (1.0 - frac) + table[i + 1] * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_satisfies_its_equation() {
        for rho in [0.1, 0.5, 0.8, 0.95] {
            let u = victim_utilization(rho);
            assert!(u > 0.0 && u < 1.0);
            assert!(
                (u - (-(1.0 - u) / rho).exp()).abs() < 1e-9,
                "rho {rho}: u {u}"
            );
        }
    }

    /// Known values: at 80 % utilization the model cleans at u* ≈ 0.629, WA ≈ 2.69.
    #[test]
    fn eighty_percent_matches_the_published_model_value() {
        assert!((victim_utilization(0.8) - 0.6286).abs() < 1e-3);
        assert!((write_amplification(0.8) - 2.693).abs() < 1e-2);
    }

    #[test]
    fn amplification_grows_with_utilization_and_table_agrees() {
        let mut last = 1.0;
        for i in 1..99 {
            let rho = i as f64 / 100.0;
            let wa = write_amplification(rho);
            // Below ρ ≈ 0.1, u* = e^(−1/ρ)-ish underflows to 0 and WA is exactly 1.
            assert!(
                wa >= last && (rho < 0.1 || wa > last),
                "WA must increase at {rho}"
            );
            assert!(
                (write_amplification_fast(rho) - wa).abs() / wa < 1e-3,
                "table at {rho}"
            );
            last = wa;
        }
    }
}
