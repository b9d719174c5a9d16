//! The super root: the last block of the record that ends a checkpoint. It
//! holds the roots of the metadata files, so reading it (and the DAT it
//! points at) reopens the whole file system as of that checkpoint.

use crate::codec::{crc_with_hole, Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;

/// One promotion (`on`) or demotion of checkpoint `cno` whose effect on the
/// segment counters is not yet applied everywhere, as the super root
/// records it. Defined here, with the format, so that the log layer does
/// not reach up into `meta`; the reconciliation that consumes it is
/// meta/reconcile.rs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SnapChange {
    pub cno: u64,
    pub on: bool,
}

pub const SR_MAGIC: u32 = 0x5452_534C; // "LSRT"
const CRC_AT: usize = BLOCK_BYTES - 4;
/// Where version 3 keeps the SSA root: a fixed place after the longest queue.
const SSA_ROOT_AT: usize = BLOCK_BYTES - 16;
/// Where version 4 keeps the DAT journal's block count (u16), then its
/// blocks' physical addresses: after the longest queue, before the SSA root.
const DAT_JOURNAL_AT: usize = 2560;
/// Journal blocks a super root can name.
pub const SR_DAT_JOURNAL_MAX: usize = (SSA_ROOT_AT - DAT_JOURNAL_AT - 8) / 8;
const _: () = assert!(108 + 9 * SR_QUEUE_MAX <= DAT_JOURNAL_AT);
const _: () = assert!(DAT_JOURNAL_AT + 8 + 8 * SR_DAT_JOURNAL_MAX <= SSA_ROOT_AT);
/// The version this build writes.
pub const SR_VERSION: u32 = 4;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuperRoot {
    pub cno: u64,
    pub created_secs: u64,
    /// End of the DAT: numbers from here on were never handed out (free
    /// entries below it are reused, meta/dat_reuse.rs).
    pub next_vblock: u64,
    /// Next inode number to hand out (they are never reused).
    pub next_ino: u64,
    /// Root of the DAT's block map (physical block, 0 = empty).
    pub dat_root: u64,
    /// Roots of the other metadata files' block maps (virtual blocks).
    pub ifile_root: u64,
    pub cpfile_root: u64,
    pub sufile_root: u64,
    /// Copied from the geometry, checked on mount.
    pub nsegments: u64,
    /// Counters users see in statfs, kept exact by deltas.
    pub inodes_used: u64,
    pub blocks_used: u64,
    /// Background reconciliation of snapshot changes (meta/reconcile.rs):
    /// the virtual block it has reached for the head change, and the
    /// changes not yet applied to every counter, oldest first.
    pub reconcile_cursor: u64,
    pub reconcile_queue: Vec<SnapChange>,
    /// Root of the SSA's block map (virtual; 0 = no segment plugged).
    /// Version 3; earlier versions read as 0.
    pub ssa_root: u64,
    /// Physical blocks of the DAT journal: DAT entries changed since their
    /// DAT block was last written (meta/dat_journal.rs). Version 4; earlier
    /// versions read as none.
    pub dat_journal: Vec<u64>,
}

/// Queue entries a super root can hold (see FORMAT.md).
pub const SR_QUEUE_MAX: usize = 256;

impl SuperRoot {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(BLOCK_BYTES);
        w.u32(SR_MAGIC)
            .u32(SR_VERSION)
            .u64(self.cno)
            .u64(self.created_secs)
            .u64(self.next_vblock)
            .u64(self.next_ino)
            .u64(self.dat_root)
            .u64(self.ifile_root)
            .u64(self.cpfile_root)
            .u64(self.sufile_root)
            .u64(self.nsegments)
            .u64(self.inodes_used)
            .u64(self.blocks_used)
            .u64(self.reconcile_cursor)
            .u32(self.reconcile_queue.len() as u32);
        assert!(self.reconcile_queue.len() <= SR_QUEUE_MAX);
        for c in &self.reconcile_queue {
            w.u64(c.cno).u8(c.on as u8);
        }
        w.pad_to(DAT_JOURNAL_AT);
        assert!(self.dat_journal.len() <= SR_DAT_JOURNAL_MAX);
        w.u16(self.dat_journal.len() as u16)
            .pad_to(DAT_JOURNAL_AT + 8);
        for &a in &self.dat_journal {
            w.u64(a);
        }
        w.pad_to(BLOCK_BYTES);
        let mut b = w.finish();
        b[SSA_ROOT_AT..SSA_ROOT_AT + 8].copy_from_slice(&self.ssa_root.to_le_bytes());
        let crc = crc_with_hole(&b, CRC_AT);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8], where_: &str) -> Result<SuperRoot> {
        let what = format!("super root at {where_}");
        let mut r = Reader::new(b, &what);
        let v = check_header(&mut r, b, &what)?;
        let mut sr = SuperRoot {
            cno: r.u64()?,
            created_secs: r.u64()?,
            next_vblock: r.u64()?,
            next_ino: r.u64()?,
            dat_root: r.u64()?,
            ifile_root: r.u64()?,
            cpfile_root: r.u64()?,
            sufile_root: r.u64()?,
            nsegments: r.u64()?,
            inodes_used: r.u64()?,
            blocks_used: r.u64()?,
            ..Default::default()
        };
        sr.check_bounds(&what)?;
        if v >= 2 {
            // Version 1 (before reconciliation) has neither: nothing queued.
            sr.reconcile_cursor = r.u64()?;
            sr.reconcile_queue = decode_reconcile_queue(&mut r, &what)?;
        }
        if v >= 3 {
            sr.ssa_root = u64::from_le_bytes(b[SSA_ROOT_AT..SSA_ROOT_AT + 8].try_into().unwrap());
        }
        if v >= 4 {
            sr.dat_journal = decode_dat_journal(b, &what)?;
        }
        Ok(sr)
    }

    /// The counters that later arithmetic adds to stay below their limits:
    /// damaged bytes near 2^64 would overflow.
    fn check_bounds(&self, what: &str) -> Result<()> {
        if self.cno >= crate::layout::COUNTER_LIMIT {
            return Err(Error::corrupt(format!(
                "{what}: checkpoint number {:#x} is past the limit",
                self.cno
            )));
        }
        if !(crate::layout::FIRST_USER_INO..=crate::layout::MAX_INO).contains(&self.next_ino) {
            return Err(Error::corrupt(format!(
                "{what}: next inode number {} is outside {}..={}",
                self.next_ino,
                crate::layout::FIRST_USER_INO,
                crate::layout::MAX_INO
            )));
        }
        if self.next_vblock > crate::layout::VBLOCK_LIMIT {
            return Err(Error::corrupt(format!(
                "{what}: the DAT ends at virtual block {:#x}, past the limit {:#x}",
                self.next_vblock,
                crate::layout::VBLOCK_LIMIT
            )));
        }
        // Creating and allocating add to these counts. No more inodes than
        // inode numbers are in use, nor more blocks than virtual block numbers.
        for (name, n, limit) in [
            ("inodes", self.inodes_used, crate::layout::MAX_INO),
            ("blocks", self.blocks_used, crate::layout::VBLOCK_LIMIT),
        ] {
            if n > limit {
                return Err(Error::corrupt(format!(
                    "{what}: counts {n} {name} in use, more than the limit {limit:#x}"
                )));
            }
        }
        Ok(())
    }
}

/// Magic, version, size and checksum of a super root block; the version.
fn check_header(r: &mut Reader, b: &[u8], what: &str) -> Result<u32> {
    if r.u32()? != SR_MAGIC {
        return Err(Error::corrupt(format!("{what}: bad magic")));
    }
    let v = r.u32()?;
    if !(1..=SR_VERSION).contains(&v) {
        return Err(Error::unsupported(format!("{what}: version {v}")));
    }
    if b.len() != BLOCK_BYTES {
        return Err(Error::corrupt(format!("{what}: {} bytes", b.len())));
    }
    let stored = u32::from_le_bytes(b[CRC_AT..].try_into().unwrap());
    if stored != crc_with_hole(b, CRC_AT) {
        return Err(Error::corrupt(format!("{what}: checksum mismatch")));
    }
    Ok(v)
}

/// The queued snapshot changes (version 2 on), bounded by `SR_QUEUE_MAX`.
fn decode_reconcile_queue(r: &mut Reader, what: &str) -> Result<Vec<SnapChange>> {
    let n = r.u32()? as usize;
    if n > SR_QUEUE_MAX {
        return Err(Error::corrupt(format!(
            "{what}: {n} queued snapshot changes, at most {SR_QUEUE_MAX}"
        )));
    }
    let mut queue = Vec::with_capacity(n);
    for _ in 0..n {
        let cno = r.u64()?;
        let on = match r.u8()? {
            0 => false,
            1 => true,
            x => {
                return Err(Error::corrupt(format!(
                    "{what}: queued snapshot change of checkpoint {cno} has flag {x}"
                )))
            }
        };
        queue.push(SnapChange { cno, on });
    }
    Ok(queue)
}

/// The DAT journal's block addresses (version 4 on), bounded by
/// `SR_DAT_JOURNAL_MAX`.
fn decode_dat_journal(b: &[u8], what: &str) -> Result<Vec<u64>> {
    let mut r = Reader::at(b, DAT_JOURNAL_AT, what);
    let n = r.u16()? as usize;
    if n > SR_DAT_JOURNAL_MAX {
        return Err(Error::corrupt(format!(
            "{what}: {n} DAT journal blocks, at most {SR_DAT_JOURNAL_MAX}"
        )));
    }
    r.skip(6)?;
    (0..n).map(|_| r.u64()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{COUNTER_LIMIT, FIRST_USER_INO, MAX_INO, VBLOCK_LIMIT};

    /// The smallest valid super root: everything zero but the first inode number.
    fn valid() -> SuperRoot {
        SuperRoot {
            next_ino: FIRST_USER_INO,
            ..Default::default()
        }
    }

    /// Why `sr` is refused (it must be).
    fn error_of(sr: &SuperRoot) -> String {
        SuperRoot::decode(&sr.encode(), "block 9")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn round_trip() {
        let sr = SuperRoot {
            cno: 7,
            next_vblock: 99,
            ssa_root: 12,
            reconcile_queue: vec![SnapChange { cno: 3, on: true }],
            dat_journal: vec![40, 41, 77],
            ..valid()
        };
        assert_eq!(SuperRoot::decode(&sr.encode(), "test").unwrap(), sr);
        let full = SuperRoot {
            reconcile_queue: vec![SnapChange { cno: 3, on: false }; SR_QUEUE_MAX],
            dat_journal: (0..SR_DAT_JOURNAL_MAX as u64).collect(),
            ssa_root: 5,
            ..valid()
        };
        assert_eq!(SuperRoot::decode(&full.encode(), "test").unwrap(), full);
    }

    /// Found by the `image` fuzz target: a resealed super root whose next
    /// inode number was past `MAX_INO` made statfs's free-inode count
    /// underflow (a panic in the debug build the fuzzer runs).
    #[test]
    fn a_next_inode_number_out_of_range_is_corrupt() {
        let mut sr = SuperRoot {
            next_ino: MAX_INO + 1,
            ..valid()
        };
        let e = error_of(&sr);
        assert!(
            e.contains("super root at block 9: next inode number"),
            "{e}"
        );
        sr.next_ino = 3;
        assert!(error_of(&sr).contains("next inode number 3"));
        sr.next_ino = MAX_INO;
        assert!(SuperRoot::decode(&sr.encode(), "block 9").is_ok());
    }

    /// Found by the `image` fuzz target: a resealed super root whose DAT
    /// ended past the limit let the roll-forward allocate virtual blocks
    /// the cache cannot key (a debug assertion fired).
    #[test]
    fn a_dat_end_past_the_limit_is_corrupt() {
        let mut sr = SuperRoot {
            next_vblock: VBLOCK_LIMIT,
            ..valid()
        };
        assert!(SuperRoot::decode(&sr.encode(), "test").is_ok());
        sr.next_vblock = VBLOCK_LIMIT + 1;
        let e = error_of(&sr);
        assert!(
            e.contains("super root at block 9: the DAT ends at virtual block"),
            "{e}"
        );
    }

    /// The counts of inodes and blocks in use are added to: past what
    /// inode and virtual block numbers allow, they are damage.
    #[test]
    fn counts_in_use_past_the_limits_are_corrupt() {
        let mut sr = SuperRoot {
            inodes_used: MAX_INO,
            blocks_used: VBLOCK_LIMIT,
            ..valid()
        };
        assert!(SuperRoot::decode(&sr.encode(), "test").is_ok());
        sr.inodes_used = MAX_INO + 1;
        let e = error_of(&sr);
        assert!(
            e.contains(&format!(
                "super root at block 9: counts {} inodes in use",
                MAX_INO + 1
            )),
            "{e}"
        );
        sr.inodes_used = 0;
        sr.blocks_used = u64::MAX;
        let e = error_of(&sr);
        assert!(
            e.contains(&format!("counts {} blocks in use", u64::MAX)),
            "{e}"
        );
    }

    /// The checkpoint number is added to at every checkpoint: past the
    /// limit it is damage.
    #[test]
    fn a_checkpoint_number_past_the_limit_is_corrupt() {
        let mut sr = SuperRoot {
            cno: COUNTER_LIMIT - 1,
            ..valid()
        };
        assert!(SuperRoot::decode(&sr.encode(), "test").is_ok());
        sr.cno = COUNTER_LIMIT;
        let e = error_of(&sr);
        assert!(
            e.contains("checkpoint number") && e.contains("past the limit"),
            "{e}"
        );
    }
}
