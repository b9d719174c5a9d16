//! The bytes of a victim's records, kept from planning for the copies.
//!
//! Planning a relocation reads every record of the victim whole, to check
//! its CRC before trusting its summary (`Store::segment_entries`). The
//! copies then read each block they move again, one 4 KiB read each
//! (`Store::read_stored`): in the 70 % overwrite benchmark
//! (docs/CLEANER.md) 301,320 device reads for about 260,000 blocks copied,
//! all on the thread that serves requests. The plan keeps what it read
//! instead, and a copy takes its block from there.
//!
//! Only blocks stored raw are taken from here; a block in a compressed
//! frame is read through its frame (`Store::read_stored`). Nothing writes
//! into a victim between its plan and its relocation (a plugged segment,
//! whose holes threaded logging fills, keeps its summaries in the SSA and
//! has no bytes here).

use std::fmt;

/// Runs of a victim's blocks: each its first block and its bytes, in
/// block order, not overlapping.
#[derive(Clone, Default)]
pub struct VictimReads {
    runs: Vec<(u64, Vec<u8>)>,
}

impl VictimReads {
    /// `runs`: (first block, bytes), in block order (a segment's records,
    /// as read).
    pub fn from_runs(runs: Vec<(u64, Vec<u8>)>) -> Self {
        debug_assert!(
            runs.windows(2).all(|w| w[0].0 < w[1].0),
            "victim runs out of order"
        );
        VictimReads { runs }
    }

    /// Block `pblock`'s bytes, if a run holds it.
    pub fn get(&self, pblock: u64, block_bytes: usize) -> Option<&[u8]> {
        let i = self.runs.partition_point(|(first, _)| *first <= pblock);
        let (first, buf) = self.runs.get(i.checked_sub(1)?)?;
        let at = usize::try_from(pblock - first)
            .ok()?
            .checked_mul(block_bytes)?;
        buf.get(at..at.checked_add(block_bytes)?)
    }
}

/// Not the bytes: a plan is logged with `{:?}`.
impl fmt::Debug for VictimReads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes: usize = self.runs.iter().map(|(_, b)| b.len()).sum();
        write!(f, "VictimReads({} runs, {bytes} bytes)", self.runs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BB: usize = 8;

    fn run(first: u64, blocks: u64) -> (u64, Vec<u8>) {
        let bytes = (first..first + blocks)
            .flat_map(|b| [b as u8; BB])
            .collect();
        (first, bytes)
    }

    #[test]
    fn a_block_is_found_in_its_run_and_nowhere_else() {
        let r = VictimReads::from_runs(vec![run(10, 3), run(20, 1), run(21, 4)]);
        for b in [10, 11, 12, 20, 21, 24] {
            assert_eq!(r.get(b, BB), Some(&[b as u8; BB][..]), "block {b}");
        }
        for b in [0, 9, 13, 19, 25, 1 << 40] {
            assert_eq!(r.get(b, BB), None, "block {b}");
        }
        assert_eq!(
            format!("{r:?}"),
            format!("VictimReads(3 runs, {} bytes)", 8 * BB)
        );
    }

    #[test]
    fn no_runs_hold_nothing() {
        assert_eq!(VictimReads::default().get(0, BB), None);
    }
}
