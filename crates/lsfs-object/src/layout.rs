//! Where each byte of the device lives among the objects: the file
//! system's own geometry (docs/FORMAT.md §1), so that a segment is exactly
//! one object and each superblock copy one more.
//!
//! Objects, under the file system's prefix:
//! * `geometry.json`: this layout (device size, block size, segment
//!   blocks), written once by `create`;
//! * `super-a`, `super-b`: blocks 0 and `device_blocks − 1`;
//! * `seg/N` (N in decimal): segment N, `segment_blocks` blocks, at block
//!   `1 + N·segment_blocks`;
//! * `tail`: the blocks between the last segment and the last block (the
//!   file system never writes them);
//! * `lease` (`lease.rs`) and `writer` (the last read-write open's random
//!   id, `device.rs`), `readers/<id>` (a read-only mount's hold on its
//!   checkpoint) and `readers-promoted` (the snapshots the writer made for
//!   holds; `readers.rs`): not blocks of the device.
//!
//! An object that does not exist reads as zeros.

use serde::{Deserialize, Serialize};

pub const BLOCK: u64 = 4096;

/// The layout's name in `geometry.json`; another is refused.
pub const FORMAT: &str = "lsfs-object-1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub device_bytes: u64,
    pub segment_blocks: u64,
}

/// One object of the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Obj {
    SuperA,
    Segment(u64),
    Tail,
    SuperB,
}

/// A part of a device range inside one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub obj: Obj,
    /// Byte offset inside the object.
    pub at: u64,
    pub len: u64,
}

impl Geometry {
    pub fn device_blocks(&self) -> u64 {
        self.device_bytes / BLOCK
    }

    pub fn nsegments(&self) -> u64 {
        (self.device_blocks() - 2) / self.segment_blocks
    }

    /// Checks what `create` and `open` rely on: whole blocks, room for the
    /// file system's minimum of 8 segments.
    pub fn validate(&self) -> Result<(), String> {
        if self.device_bytes % BLOCK != 0 {
            return Err(format!(
                "device size {} is not a multiple of {BLOCK}",
                self.device_bytes
            ));
        }
        if !(64..=65536).contains(&self.segment_blocks) || !self.segment_blocks.is_power_of_two() {
            return Err(format!(
                "segment_blocks {} is not a power of two in 64..=65536",
                self.segment_blocks
            ));
        }
        if self.device_blocks() < 2 + 8 * self.segment_blocks {
            return Err(format!(
                "device size {} holds fewer than 8 segments of {} blocks",
                self.device_bytes, self.segment_blocks
            ));
        }
        Ok(())
    }

    /// The object holding device block `b`, and its first block.
    fn obj_of(&self, b: u64) -> (Obj, u64) {
        let last = self.device_blocks() - 1;
        let segs_end = 1 + self.nsegments() * self.segment_blocks;
        if b == 0 {
            (Obj::SuperA, 0)
        } else if b == last {
            (Obj::SuperB, last)
        } else if b < segs_end {
            let n = (b - 1) / self.segment_blocks;
            (Obj::Segment(n), 1 + n * self.segment_blocks)
        } else {
            (Obj::Tail, segs_end)
        }
    }

    /// The object's size in bytes.
    pub fn obj_bytes(&self, o: Obj) -> u64 {
        match o {
            Obj::SuperA | Obj::SuperB => BLOCK,
            Obj::Segment(_) => self.segment_blocks * BLOCK,
            Obj::Tail => {
                (self.device_blocks() - 1 - (1 + self.nsegments() * self.segment_blocks)) * BLOCK
            }
        }
    }

    /// The pieces of the device range `[offset, offset + len)`, in order.
    /// The caller checked that the range lies inside the device.
    pub fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let (mut pos, end) = (offset, offset + len);
        while pos < end {
            let (obj, first) = self.obj_of(pos / BLOCK);
            let start = first * BLOCK;
            let at = pos - start;
            let n = (self.obj_bytes(obj) - at).min(end - pos);
            out.push(Piece { obj, at, len: n });
            pos += n;
        }
        out
    }

    /// The segment objects a discarded range `[offset, offset + len)`
    /// covers whole, in order (the file system discards adjacent freed
    /// segments as one range).
    pub fn whole_segments(&self, offset: u64, len: u64) -> Vec<Obj> {
        self.pieces(offset, len)
            .into_iter()
            .filter(|p| {
                matches!(p.obj, Obj::Segment(_)) && p.at == 0 && p.len == self.obj_bytes(p.obj)
            })
            .map(|p| p.obj)
            .collect()
    }
}

impl Obj {
    /// The object's name under the file system's prefix.
    pub fn name(&self) -> String {
        match self {
            Obj::SuperA => "super-a".into(),
            Obj::SuperB => "super-b".into(),
            Obj::Segment(n) => format!("seg/{n}"),
            Obj::Tail => "tail".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        // 1 + 9 segments of 64 blocks + 5 unused + 1.
        Geometry {
            device_bytes: (1 + 9 * 64 + 5 + 1) * BLOCK,
            segment_blocks: 64,
        }
    }

    #[test]
    fn every_block_is_in_exactly_one_object_in_order() {
        let g = geo();
        g.validate().unwrap();
        let all = g.pieces(0, g.device_bytes);
        let total: u64 = all.iter().map(|p| p.len).sum();
        assert_eq!(total, g.device_bytes);
        assert_eq!(all[0].obj, Obj::SuperA);
        assert_eq!(all[1].obj, Obj::Segment(0));
        assert_eq!(all[9].obj, Obj::Segment(8));
        assert_eq!(
            all[10],
            Piece {
                obj: Obj::Tail,
                at: 0,
                len: 5 * BLOCK
            }
        );
        assert_eq!(all[11].obj, Obj::SuperB);
        for p in &all {
            assert_eq!((p.at, p.len), (0, g.obj_bytes(p.obj)), "{p:?}");
        }
    }

    #[test]
    fn a_range_across_a_segment_boundary_is_cut_there() {
        let g = geo();
        let p = g.pieces(60 * BLOCK, 10 * BLOCK);
        assert_eq!(
            p,
            vec![
                Piece {
                    obj: Obj::Segment(0),
                    at: 59 * BLOCK,
                    len: 5 * BLOCK
                },
                Piece {
                    obj: Obj::Segment(1),
                    at: 0,
                    len: 5 * BLOCK
                },
            ]
        );
        assert_eq!(
            g.whole_segments(65 * BLOCK, 64 * BLOCK),
            vec![Obj::Segment(1)]
        );
        assert_eq!(g.whole_segments(65 * BLOCK, 63 * BLOCK), vec![]);
        // Adjacent segments discarded as one range are each whole; a part
        // of one at either end is not.
        assert_eq!(
            g.whole_segments(BLOCK, 128 * BLOCK),
            vec![Obj::Segment(0), Obj::Segment(1)]
        );
        assert_eq!(
            g.whole_segments(2 * BLOCK, 128 * BLOCK),
            vec![Obj::Segment(1)]
        );
    }

    #[test]
    fn bad_geometries_name_what_is_wrong() {
        let mut g = geo();
        g.segment_blocks = 100;
        assert!(g.validate().unwrap_err().contains("power of two"));
        g.segment_blocks = 4096;
        assert!(g.validate().unwrap_err().contains("fewer than 8 segments"));
    }
}
