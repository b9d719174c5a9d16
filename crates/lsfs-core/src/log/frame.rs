//! Compressed frames: the payload of a compressed record (FORMAT.md §3.3),
//! its `n` data blocks compressed as one unit with LZ4. The frame sits in
//! the record's first payload slots; the record keeps all `n` slots, so
//! every block keeps its own physical address, and the slots after the
//! frame are simply not written.

use crate::codec::{crc_with_hole, Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;

pub const FRAME_MAGIC: u32 = 0x315A_534C; // "LSZ1"
/// The only codec so far: one LZ4 block (`lz4_flex::block`).
pub const CODEC_LZ4: u8 = 1;
pub const FRAME_HEADER_BYTES: usize = 32;
const CRC_AT: usize = 16;

/// Compress `blocks` (whole blocks, one after another) into a frame of
/// whole blocks, or `None` when that would not take fewer blocks than
/// storing them raw: such records are written as before.
pub fn compress(blocks: &[u8]) -> Option<Vec<u8>> {
    assert!(!blocks.is_empty() && blocks.len() % BLOCK_BYTES == 0);
    let nslots = blocks.len() / BLOCK_BYTES;
    if nslots < 2 {
        return None;
    }
    let packed = lz4_flex::block::compress(blocks);
    let m = (FRAME_HEADER_BYTES + packed.len()).div_ceil(BLOCK_BYTES);
    if m >= nslots {
        return None;
    }
    let mut w = Writer::with_capacity(FRAME_HEADER_BYTES);
    w.u32(FRAME_MAGIC)
        .u8(CODEC_LZ4)
        .pad_to(8)
        .u32(nslots as u32)
        .u32(packed.len() as u32)
        .u32(0)
        .pad_to(FRAME_HEADER_BYTES);
    let mut out = w.finish();
    out.extend_from_slice(&packed);
    out.resize(m * BLOCK_BYTES, 0);
    let crc = crc_with_hole(&out, CRC_AT);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

/// What a frame's first block says: (slots it decompresses to, blocks it
/// occupies, compressed bytes).
pub fn frame_size(first: &[u8], what: &str) -> Result<(usize, usize, usize)> {
    let mut r = Reader::new(first, what);
    if r.u32()? != FRAME_MAGIC {
        return Err(Error::corrupt(format!("{what}: not a compressed frame")));
    }
    let codec = r.u8()?;
    if codec != CODEC_LZ4 {
        return Err(Error::corrupt(format!("{what}: unknown codec {codec}")));
    }
    r.skip(3)?;
    let nslots = r.u32()? as usize;
    let len = r.u32()? as usize;
    let m = (FRAME_HEADER_BYTES + len).div_ceil(BLOCK_BYTES);
    if !(2..=crate::log::record::MAX_RECORD_PAYLOAD).contains(&nslots) || m >= nslots {
        return Err(Error::corrupt(format!(
            "{what}: frame of {nslots} slots in {m} blocks"
        )));
    }
    Ok((nslots, m, len))
}

/// Verify and decompress a whole frame (`m` blocks, as `frame_size` says)
/// into its `nslots` blocks.
pub fn decompress(frame: &[u8], what: &str) -> Result<Vec<u8>> {
    let (nslots, m, len) = frame_size(frame, what)?;
    if frame.len() < m * BLOCK_BYTES {
        return Err(Error::corrupt(format!("{what}: frame cut short")));
    }
    let frame = &frame[..m * BLOCK_BYTES];
    let stored = crate::codec::get_u32_at(frame, CRC_AT);
    if crc_with_hole(frame, CRC_AT) != stored {
        return Err(Error::corrupt(format!("{what}: frame checksum mismatch")));
    }
    let packed = &frame[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len];
    let out = lz4_flex::block::decompress(packed, nslots * BLOCK_BYTES)
        .map_err(|e| Error::corrupt(format!("{what}: frame does not decompress: {e}")))?;
    if out.len() != nslots * BLOCK_BYTES {
        return Err(Error::corrupt(format!(
            "{what}: frame decompresses to {} bytes, not {nslots} blocks",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(nblocks: usize) -> Vec<u8> {
        let line = b"fn main() { println!(\"hello, log-structured world\"); }\n";
        line.iter()
            .copied()
            .cycle()
            .take(nblocks * BLOCK_BYTES)
            .collect()
    }

    #[test]
    fn round_trip() {
        for n in [2, 3, 17, 1024] {
            let data = text(n);
            let f = compress(&data).expect("text shrinks");
            assert!(f.len() < data.len() && f.len() % BLOCK_BYTES == 0);
            assert_eq!(frame_size(&f, "t").unwrap().0, n);
            assert_eq!(decompress(&f, "t").unwrap(), data);
        }
    }

    #[test]
    fn incompressible_or_single_blocks_stay_raw() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let noise: Vec<u8> = (0..8 * BLOCK_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(compress(&noise).is_none());
        assert!(compress(&text(1)).is_none());
    }

    #[test]
    fn damage_is_refused() {
        let data = text(8);
        let f = compress(&data).unwrap();
        for at in [0, 4, 8, 12, 20, FRAME_HEADER_BYTES + 3] {
            let mut bad = f.clone();
            bad[at] ^= 0x40;
            assert!(decompress(&bad, "t").is_err(), "byte {at}");
        }
        assert!(decompress(&f[..BLOCK_BYTES / 2], "t").is_err());
    }
}
