//! lsfs-sim: simulators that reproduce the seed papers' experiments with the policy code the
//! engine runs (`lsfs-policy`).
//!
//! * [`gc`]: Rosenblum-style cleaning simulator (write cost, write amplification, segment
//!   utilization distributions), with an oracle lower bound;
//! * [`cache`]: trace-driven page-cache simulator (hit ratio, after-cache write trace);
//! * [`ftl`]: page-level and FAST hybrid FTL simulator (WAF, erase counts);
//! * [`workload`]: synthetic before-cache traces and file-system workload generators;
//! * [`cli`]: the `lsfs sim …` command line, embedded by the `lsfs` binary.

pub mod access;
pub mod cache;
pub mod cli;
pub mod ftl;
pub mod gc;
pub mod plot;
pub mod progress;
pub mod workload;
