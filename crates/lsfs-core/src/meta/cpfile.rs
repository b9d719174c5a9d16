//! The CPFILE: one entry per checkpoint that still exists. Checkpoints are
//! taken every few seconds, and plain ones older than the protection period
//! are deleted, so the table of live entries stays small and is kept in
//! memory; entry `cno` lives in CPFILE block `cno / CP_PER_BLOCK`.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;
use std::collections::{BTreeMap, BTreeSet};

pub const CP_ENTRY_BYTES: usize = 64;
pub const CP_PER_BLOCK: u64 = (BLOCK_BYTES / CP_ENTRY_BYTES) as u64;

pub const CP_VALID: u32 = 1;
pub const CP_SNAPSHOT: u32 = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpEntry {
    pub cno: u64,
    pub flags: u32,
    pub created_secs: u64,
    /// Root of the IFILE as of this checkpoint (virtual block).
    pub ifile_root: u64,
    pub inodes_used: u64,
    pub blocks_used: u64,
    pub next_ino: u64,
}

impl CpEntry {
    pub fn is_snapshot(&self) -> bool {
        self.flags & CP_SNAPSHOT != 0
    }
    fn encode(&self, w: &mut Writer) {
        w.u64(self.cno)
            .u32(self.flags)
            .u32(0)
            .u64(self.created_secs)
            .u64(self.ifile_root)
            .u64(self.inodes_used)
            .u64(self.blocks_used)
            .u64(self.next_ino)
            .u64(0);
    }
    fn decode(r: &mut Reader) -> Result<CpEntry> {
        let cno = r.u64()?;
        let flags = r.u32()?;
        r.skip(4)?;
        let e = CpEntry {
            cno,
            flags,
            created_secs: r.u64()?,
            ifile_root: r.u64()?,
            inodes_used: r.u64()?,
            blocks_used: r.u64()?,
            next_ino: r.u64()?,
        };
        r.skip(8)?;
        Ok(e)
    }
}

#[derive(Default)]
pub struct CpTable {
    pub entries: BTreeMap<u64, CpEntry>,
    pub dirty_blocks: BTreeSet<u64>,
    /// Checkpoints removed since the last checkpoint was written: the last
    /// checkpoint's CPFILE still lists them, so a move record names them
    /// (recovery must not keep a checkpoint whose blocks a pass freed).
    pub removed_since_checkpoint: BTreeSet<u64>,
    /// A checkpoint was promoted or demoted since the last checkpoint was
    /// written: the counters follow in the background from a state that
    /// recovery would not share, so passes wait for a checkpoint.
    pub flags_changed_since_checkpoint: bool,
}

impl CpTable {
    pub fn insert(&mut self, e: CpEntry) {
        self.dirty_blocks.insert(e.cno / CP_PER_BLOCK);
        self.entries.insert(e.cno, e);
    }
    pub fn remove(&mut self, cno: u64) -> Option<CpEntry> {
        self.dirty_blocks.insert(cno / CP_PER_BLOCK);
        let e = self.entries.remove(&cno);
        if e.is_some() {
            self.removed_since_checkpoint.insert(cno);
        }
        e
    }
    pub fn set_snapshot(&mut self, cno: u64, on: bool) -> Result<()> {
        let e = self.entries.get_mut(&cno).ok_or_else(|| {
            Error::invalid(format!(
                "checkpoint {cno} does not exist (list them with `lsfs checkpoint list`)"
            ))
        })?;
        self.flags_changed_since_checkpoint = true;
        if on {
            e.flags |= CP_SNAPSHOT;
        } else {
            e.flags &= !CP_SNAPSHOT;
        }
        self.dirty_blocks.insert(cno / CP_PER_BLOCK);
        Ok(())
    }
    pub fn snapshots(&self) -> Vec<u64> {
        self.entries
            .values()
            .filter(|e| e.is_snapshot())
            .map(|e| e.cno)
            .collect()
    }
    pub fn latest(&self) -> Option<&CpEntry> {
        self.entries.values().next_back()
    }
    pub fn encode_block(&self, idx: u64) -> Option<Vec<u8>> {
        let first = idx * CP_PER_BLOCK;
        let mut any = false;
        let mut w = Writer::with_capacity(BLOCK_BYTES);
        // Slot by slot: a block decoded from the disk may end at u64::MAX.
        for cno in (0..CP_PER_BLOCK).map(|slot| first + slot) {
            match self.entries.get(&cno) {
                Some(e) => {
                    any = true;
                    e.encode(&mut w)
                }
                None => {
                    w.pad_to(w.buf.len() + CP_ENTRY_BYTES);
                }
            }
        }
        w.pad_to(BLOCK_BYTES);
        any.then(|| w.finish())
    }
    pub fn decode_block(&mut self, idx: u64, b: &[u8]) -> Result<()> {
        let mut r = Reader::new(b, "CPFILE block");
        // `idx` is a B-tree key read from the disk.
        let first = idx
            .checked_mul(CP_PER_BLOCK)
            .ok_or_else(|| Error::corrupt(format!("CPFILE block {idx}: index out of range")))?;
        for slot in 0..CP_PER_BLOCK {
            let e = CpEntry::decode(&mut r)?;
            if e.flags & CP_VALID != 0 {
                if e.cno != first + slot {
                    return Err(Error::corrupt(format!(
                        "CPFILE block {idx}: slot {slot} holds checkpoint {}",
                        e.cno
                    )));
                }
                self.entries.insert(e.cno, e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `meta_entries` fuzz target (input
    /// `0b 00 00 00 00 00 00 00 55 02 6b`): a CPFILE block index read from a
    /// B-tree key overflowed the first checkpoint number of the block.
    #[test]
    fn huge_block_index_is_corrupt_not_overflow() {
        let input = [0x0b, 0, 0, 0, 0, 0, 0, 0, 0x55, 0x02, 0x6b];
        let idx = u64::from_le_bytes(input[1..9].try_into().unwrap());
        let mut t = CpTable::default();
        let e = t.decode_block(idx, &[0; BLOCK_BYTES]).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert!(t.entries.is_empty());
    }

    /// Found by the `meta_entries` fuzz target (its input below: which,
    /// idx u64, nsegments u16, block): the last CPFILE block a u64 checkpoint
    /// number can have decoded, but re-encoding it overflowed.
    #[test]
    fn last_possible_block_re_encodes() {
        let input: &[u8] = &[
            0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03, 0x0b, 0x00, 0x0a, 0x00, 0x00,
            0x00, 0x08, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x0b,
            0x00, 0x00, 0x08, 0x02, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x03, 0x0b, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x08, 0x02, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x0b, 0x00, 0x00, 0x08, 0x02, 0x3f,
            0x00, 0x00, 0x00, 0x00, 0x95, 0x95, 0x00, 0x02, 0x00, 0x55, 0x02, 0x6b,
        ];
        let idx = u64::from_le_bytes(input[1..9].try_into().unwrap());
        assert_eq!(idx, u64::MAX / CP_PER_BLOCK);
        let mut b = input[11..].to_vec();
        b.resize(BLOCK_BYTES, 0);
        let mut t = CpTable::default();
        t.decode_block(idx, &b).unwrap();
        let _ = t.encode_block(idx);
        // And with a valid entry in the block's last possible slot.
        let cno = u64::MAX - 1;
        let mut b = vec![0; BLOCK_BYTES];
        let slot = (cno % CP_PER_BLOCK) as usize * CP_ENTRY_BYTES;
        b[slot..slot + 8].copy_from_slice(&cno.to_le_bytes());
        b[slot + 8..slot + 12].copy_from_slice(&CP_VALID.to_le_bytes());
        let mut t = CpTable::default();
        t.decode_block(idx, &b).unwrap();
        assert_eq!(t.entries.len(), 1);
        assert_eq!(t.encode_block(idx).unwrap(), b);
    }
}
