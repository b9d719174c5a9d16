//! Policies shared by the lsfs engine (`lsfs-core`) and the simulators (`lsfs-sim`).
//!
//! * [`cache`]: page/block cache replacement behind [`cache::Replacement`]; TS-CLOCK is the
//!   engine's default, the others are baselines for the cache simulator.
//! * [`gc`]: cleaner victim selection behind [`gc::SelectionPolicy`], fed with the SUFILE's
//!   per-segment counters ([`gc::SegmentUsage`]), and the online temperature classifier that
//!   routes writes to hot and cold streams.
//!
//! The crate depends on nothing but `std` so the engine can use it without pulling anything in.

pub mod cache;
pub mod gc;
mod rng;

pub use rng::SplitMix64;
