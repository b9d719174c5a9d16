//! Which block each user write goes to: uniform, hot/cold, Zipf, or a recorded trace.
//! All generators draw from one seeded [`SplitMix64`], so a seed fixes the whole sequence.

use lsfs_policy::SplitMix64;
use serde::Serialize;

/// The access pattern over `blocks` live blocks (block ids 0..blocks).
#[derive(Clone, Debug, Serialize)]
pub enum AccessSpec {
    Uniform,
    /// `hot_fraction` of the blocks (the lowest ids) receive `hot_write_fraction` of the writes.
    HotCold {
        hot_fraction: f64,
        hot_write_fraction: f64,
    },
    /// Rank r (0-based) is written with probability ∝ 1/(r+1)^exponent.
    Zipf {
        exponent: f64,
    },
    /// Block ids replayed in order, cyclically, reduced modulo the block count.
    Trace {
        blocks: Vec<u64>,
    },
}

impl AccessSpec {
    pub fn label(&self) -> String {
        match self {
            AccessSpec::Uniform => "uniform".into(),
            AccessSpec::HotCold {
                hot_fraction,
                hot_write_fraction,
            } => format!(
                "hot-cold {:.0}/{:.0}",
                hot_write_fraction * 100.0,
                hot_fraction * 100.0
            ),
            AccessSpec::Zipf { exponent } => format!("zipf {exponent}"),
            AccessSpec::Trace { blocks } => format!("trace ({} writes)", blocks.len()),
        }
    }
}

/// A generator instance for one run.
pub struct Access {
    kind: Kind,
    rng: SplitMix64,
}

enum Kind {
    Uniform {
        blocks: u64,
    },
    HotCold {
        hot_blocks: u64,
        cold_blocks: u64,
        hot_write_fraction: f64,
    },
    Zipf {
        cdf: Vec<f64>,
    },
    Trace {
        blocks: Vec<u64>,
        next: usize,
        modulo: u64,
    },
}

impl Access {
    pub fn new(spec: &AccessSpec, blocks: u64, seed: u64) -> Self {
        assert!(blocks > 0, "no blocks to write");
        let kind = match spec {
            AccessSpec::Uniform => Kind::Uniform { blocks },
            AccessSpec::HotCold {
                hot_fraction,
                hot_write_fraction,
            } => {
                assert!(
                    (0.0..1.0).contains(hot_fraction) && (0.0..=1.0).contains(hot_write_fraction)
                );
                let hot_blocks =
                    ((blocks as f64 * hot_fraction).round() as u64).clamp(1, blocks - 1);
                Kind::HotCold {
                    hot_blocks,
                    cold_blocks: blocks - hot_blocks,
                    hot_write_fraction: *hot_write_fraction,
                }
            }
            AccessSpec::Zipf { exponent } => {
                let mut cdf = Vec::with_capacity(blocks as usize);
                let mut sum = 0.0;
                for r in 0..blocks {
                    sum += 1.0 / ((r + 1) as f64).powf(*exponent);
                    cdf.push(sum);
                }
                cdf.iter_mut().for_each(|c| *c /= sum);
                Kind::Zipf { cdf }
            }
            AccessSpec::Trace { blocks: trace } => {
                assert!(!trace.is_empty(), "empty trace");
                Kind::Trace {
                    blocks: trace.clone(),
                    next: 0,
                    modulo: blocks,
                }
            }
        };
        Self {
            kind,
            rng: SplitMix64::new(seed),
        }
    }

    pub fn next_block(&mut self) -> u64 {
        match &mut self.kind {
            Kind::Uniform { blocks } => self.rng.below(*blocks),
            Kind::HotCold {
                hot_blocks,
                cold_blocks,
                hot_write_fraction,
            } => {
                if self.rng.unit_f64() < *hot_write_fraction {
                    self.rng.below(*hot_blocks)
                } else {
                    *hot_blocks + self.rng.below(*cold_blocks)
                }
            }
            Kind::Zipf { cdf } => {
                let x = self.rng.unit_f64();
                (cdf.partition_point(|c| *c < x) as u64).min(cdf.len() as u64 - 1)
            }
            Kind::Trace {
                blocks,
                next,
                modulo,
            } => {
                let b = blocks[*next] % *modulo;
                *next = (*next + 1) % blocks.len();
                b
            }
        }
    }
}

/// Read a trace: whitespace-separated unsigned block numbers; `#` starts a comment line.
pub fn parse_block_trace(text: &str) -> Result<Vec<u64>, String> {
    let mut blocks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        for word in line.split_whitespace() {
            blocks.push(
                word.parse()
                    .map_err(|e| format!("line {}: {word:?}: {e}", n + 1))?,
            );
        }
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_cold_sends_the_configured_share_to_the_hot_set() {
        let spec = AccessSpec::HotCold {
            hot_fraction: 0.1,
            hot_write_fraction: 0.9,
        };
        let mut a = Access::new(&spec, 1000, 3);
        let hot = (0..100_000).filter(|_| a.next_block() < 100).count();
        assert!(
            (hot as f64 / 100_000.0 - 0.9).abs() < 0.01,
            "hot share {hot}"
        );
    }

    #[test]
    fn zipf_rank_zero_is_the_most_frequent() {
        let mut a = Access::new(&AccessSpec::Zipf { exponent: 1.0 }, 100, 5);
        let mut counts = [0u32; 100];
        for _ in 0..50_000 {
            counts[a.next_block() as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[99]);
        // P(rank 0) = 1 / H_100 ≈ 0.193.
        assert!((counts[0] as f64 / 50_000.0 - 0.193).abs() < 0.01);
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Access::new(&AccessSpec::Uniform, 1 << 20, 9);
        let mut b = Access::new(&AccessSpec::Uniform, 1 << 20, 9);
        assert!((0..100).all(|_| a.next_block() == b.next_block()));
    }

    #[test]
    fn trace_parses_and_replays_modulo_the_block_count() {
        let t = parse_block_trace("# comment\n1 2\n  7\n").unwrap();
        assert_eq!(t, vec![1, 2, 7]);
        let mut a = Access::new(&AccessSpec::Trace { blocks: t }, 5, 0);
        let got: Vec<u64> = (0..4).map(|_| a.next_block()).collect();
        assert_eq!(got, vec![1, 2, 2, 1]);
        assert!(parse_block_trace("x").is_err());
    }
}
