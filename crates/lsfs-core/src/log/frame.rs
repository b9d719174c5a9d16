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

/// Buffers one compressing thread keeps from one frame to the next: the
/// blocks gathered into one run (LZ4 compresses a contiguous input) and the
/// frame as it is built, so that a batch of 4 MiB records does not
/// allocate and fault in two fresh 4 MiB buffers per record.
#[derive(Default)]
pub struct Scratch {
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Scratch {
    /// Bytes held now.
    pub fn capacity(&self) -> usize {
        self.input.capacity() + self.output.capacity()
    }
}

/// Compress `blocks` (whole blocks, one after another) into a frame of
/// whole blocks, or `None` when that would not take fewer blocks than
/// storing them raw: such records are written as before.
pub fn compress(blocks: &[u8]) -> Option<Vec<u8>> {
    assert!(!blocks.is_empty() && blocks.len() % BLOCK_BYTES == 0);
    compress_blocks(&[blocks], &mut Scratch::default())
}

/// [`compress`] of the blocks `parts` (each whole blocks) taken one after
/// another, built in `scratch`: the same frame, byte for byte.
pub fn compress_blocks(parts: &[&[u8]], scratch: &mut Scratch) -> Option<Vec<u8>> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    assert!(len > 0 && len % BLOCK_BYTES == 0);
    let nslots = len / BLOCK_BYTES;
    if nslots < 2 {
        return None;
    }
    let Scratch { input, output } = scratch;
    input.clear();
    // Exact sizes: what a thread keeps is then at most one record's input
    // and LZ4's worst case for it, not what doubling rounds them up to.
    input.reserve_exact(len);
    for p in parts {
        input.extend_from_slice(p);
    }
    // Room for the header and LZ4's worst case. Only what this frame
    // writes is read back below; the rest may hold an earlier frame's bytes.
    let room = FRAME_HEADER_BYTES + lz4_flex::block::get_maximum_output_size(len);
    if output.len() < room {
        output.reserve_exact(room - output.len());
        output.resize(room, 0);
    }
    let packed = lz4_flex::block::compress_into(input, &mut output[FRAME_HEADER_BYTES..])
        .expect("room for LZ4's worst case");
    let m = (FRAME_HEADER_BYTES + packed).div_ceil(BLOCK_BYTES);
    if m >= nslots {
        return None;
    }
    let mut w = Writer::with_capacity(FRAME_HEADER_BYTES);
    w.u32(FRAME_MAGIC)
        .u8(CODEC_LZ4)
        .pad_to(8)
        .u32(nslots as u32)
        .u32(packed as u32)
        .u32(0)
        .pad_to(FRAME_HEADER_BYTES);
    output[..FRAME_HEADER_BYTES].copy_from_slice(&w.finish());
    // m < nslots blocks, and the output holds at least the input's length.
    let end = m * BLOCK_BYTES;
    output[FRAME_HEADER_BYTES + packed..end].fill(0);
    let mut out = output[..end].to_vec();
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

    /// A frame built as before scratch buffers: `lz4_flex::block::compress`
    /// into a fresh buffer, header, zero padding, checksum.
    fn frame_as_built_first(blocks: &[u8]) -> Option<Vec<u8>> {
        let nslots = blocks.len() / BLOCK_BYTES;
        let packed = lz4_flex::block::compress(blocks);
        let m = (FRAME_HEADER_BYTES + packed.len()).div_ceil(BLOCK_BYTES);
        if nslots < 2 || m >= nslots {
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

    /// A scratch that held a bigger, less compressible frame leaves nothing
    /// of it in the next: the same bytes as a fresh buffer, whatever the
    /// blocks were split into.
    #[test]
    fn reused_scratch_builds_the_same_frames() {
        let mut scratch = Scratch::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut half_noise: Vec<u8> = text(64);
        for b in half_noise.iter_mut().step_by(2) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        for data in [half_noise, text(3), text(1024), text(2), text(1)] {
            let parts: Vec<&[u8]> = data.chunks(BLOCK_BYTES).collect();
            let got = compress_blocks(&parts, &mut scratch);
            assert_eq!(got, frame_as_built_first(&data));
            assert_eq!(compress(&data), got);
        }
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
