//! Compressed frames: the payload of a compressed record (FORMAT.md §3.3),
//! its `n` data blocks compressed as one unit with LZ4 or zstd (the
//! codec byte of its header says which). The frame sits in
//! the record's first payload slots; the record keeps all `n` slots, so
//! every block keeps its own physical address, and the slots after the
//! frame are simply not written.

use crate::codec::{crc_with_hole, Reader, Writer};
use crate::error::{Error, Result};
use crate::layout::BLOCK_BYTES;

pub const FRAME_MAGIC: u32 = 0x315A_534C; // "LSZ1"
/// Codec byte: one LZ4 block (`lz4_flex::block`).
pub const CODEC_LZ4: u8 = 1;
/// Codec byte: one zstd frame (the reference library, `zstd::bulk`). Only
/// images with FEATURE_INCOMPAT_ZSTD_FRAMES hold such frames.
pub const CODEC_ZSTD: u8 = 2;
/// The zstd level frames are made with unless the mount says
/// (`compress=zstd:N`): the library's own default, which on source text
/// wrote 0.5-0.6 of LZ4's bytes for about 1.5 times its CPU
/// (docs/PERFORMANCE.md, "Compressed records"). A level changes only how
/// long a frame takes to make and how small it is, never how it is read,
/// so it is a mount's choice and the image does not record it.
pub const ZSTD_LEVEL: i32 = 3;
/// The zstd levels a mount may choose: the library's usual range. Levels
/// 20 to 22 ("ultra") need windows of up to 128 MiB per compressing
/// thread for frames of at most 4 MiB, and negative ones trade ratio for
/// a speed LZ4 already has.
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// How a frame's payload is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Lz4,
    Zstd,
}

impl Codec {
    /// The byte a frame's header stores.
    pub fn byte(self) -> u8 {
        match self {
            Codec::Lz4 => CODEC_LZ4,
            Codec::Zstd => CODEC_ZSTD,
        }
    }

    fn of_byte(b: u8) -> Option<Codec> {
        match b {
            CODEC_LZ4 => Some(Codec::Lz4),
            CODEC_ZSTD => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The name the configuration and `lsfs stats` use.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }

    /// The most bytes `len` input bytes may compress into.
    fn bound(self, len: usize) -> usize {
        match self {
            Codec::Lz4 => lz4_flex::block::get_maximum_output_size(len),
            Codec::Zstd => zstd::zstd_safe::compress_bound(len),
        }
    }
}

/// How new frames are made: the codec and, for zstd, the level. Only the
/// codec reaches the image (the frame's codec byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Method {
    pub codec: Codec,
    /// zstd's level ([`ZSTD_LEVELS`]); unused by LZ4.
    pub level: i32,
}

impl Method {
    /// The configuration's word: `lz4`, `zstd`, or `zstd:N` for a level
    /// other than [`ZSTD_LEVEL`].
    pub fn name(self) -> String {
        match self.codec {
            Codec::Zstd if self.level != ZSTD_LEVEL => format!("zstd:{}", self.level),
            c => c.name().to_string(),
        }
    }
}

impl From<Codec> for Method {
    /// The codec at its default level.
    fn from(codec: Codec) -> Method {
        Method {
            codec,
            level: ZSTD_LEVEL,
        }
    }
}
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
    /// zstd's compression context (1.3 MiB at level 3) and its level,
    /// made at the first zstd frame and kept like the buffers (making one
    /// allocates its tables anew).
    zstd: Option<(zstd::bulk::Compressor<'static>, i32)>,
}

impl Scratch {
    /// Bytes held now.
    pub fn capacity(&self) -> usize {
        self.input.capacity() + self.output.capacity()
    }
}

/// Compress `blocks` (whole blocks, one after another) with LZ4 into a
/// frame of whole blocks, or `None` when that would not take fewer blocks
/// than storing them raw: such records are written as before.
pub fn compress(blocks: &[u8]) -> Option<Vec<u8>> {
    compress_with(Codec::Lz4, blocks)
}

/// [`compress`] with `codec`.
pub fn compress_with(codec: Codec, blocks: &[u8]) -> Option<Vec<u8>> {
    assert!(!blocks.is_empty() && blocks.len() % BLOCK_BYTES == 0);
    compress_blocks_with(codec, &[blocks], &mut Scratch::default())
}

/// [`compress`] of the blocks `parts` (each whole blocks) taken one after
/// another, built in `scratch`: the same frame, byte for byte.
pub fn compress_blocks(parts: &[&[u8]], scratch: &mut Scratch) -> Option<Vec<u8>> {
    compress_blocks_with(Codec::Lz4, parts, scratch)
}

/// [`compress_blocks`] with `method` (a [`Codec`] at its default level,
/// or a [`Method`]).
pub fn compress_blocks_with(
    method: impl Into<Method>,
    parts: &[&[u8]],
    scratch: &mut Scratch,
) -> Option<Vec<u8>> {
    let Method { codec, level } = method.into();
    let len: usize = parts.iter().map(|p| p.len()).sum();
    assert!(len > 0 && len % BLOCK_BYTES == 0);
    let nslots = len / BLOCK_BYTES;
    if nslots < 2 {
        return None;
    }
    let Scratch {
        input,
        output,
        zstd,
    } = scratch;
    // One part (a record's run, already in its buffer) is compressed where
    // it lies; several (blocks from the cache) are gathered first.
    let input: &[u8] = if let [one] = parts {
        one
    } else {
        input.clear();
        // Exact sizes: what a thread keeps is then at most one record's
        // input and LZ4's worst case for it, not what doubling rounds
        // them up to.
        input.reserve_exact(len);
        for p in parts {
            input.extend_from_slice(p);
        }
        input
    };
    // Room for the header and the codec's worst case. Only what this frame
    // writes is read back below; the rest may hold an earlier frame's bytes.
    let room = FRAME_HEADER_BYTES + codec.bound(len);
    if output.len() < room {
        output.reserve_exact(room - output.len());
        output.resize(room, 0);
    }
    let packed = match codec {
        Codec::Lz4 => lz4_flex::block::compress_into(input, &mut output[FRAME_HEADER_BYTES..])
            .expect("room for LZ4's worst case"),
        Codec::Zstd => {
            let (z, at) = zstd.get_or_insert_with(|| {
                let z = zstd::bulk::Compressor::new(level).expect("zstd makes a context");
                (z, level)
            });
            if *at != level {
                z.set_compression_level(level)
                    .expect("a level in ZSTD_LEVELS");
                *at = level;
            }
            z.compress_to_buffer(input, &mut output[FRAME_HEADER_BYTES..room])
                .expect("room for zstd's worst case")
        }
    };
    if frame_blocks(packed) >= nslots {
        return None;
    }
    // The output holds at least the input's length, so the frame's blocks.
    Some(seal_frame(output, codec, packed, nslots))
}

/// Blocks a frame of `packed` compressed bytes takes.
fn frame_blocks(packed: usize) -> usize {
    (FRAME_HEADER_BYTES + packed).div_ceil(BLOCK_BYTES)
}

/// The frame whose compressed bytes are `buf[FRAME_HEADER_BYTES..][..packed]`
/// and which decompresses to `nslots` blocks: header, zero padding to
/// whole blocks (`buf` holds at least them), checksum.
fn seal_frame(buf: &mut [u8], codec: Codec, packed: usize, nslots: usize) -> Vec<u8> {
    let mut w = Writer::with_capacity(FRAME_HEADER_BYTES);
    w.u32(FRAME_MAGIC)
        .u8(codec.byte())
        .pad_to(8)
        .u32(nslots as u32)
        .u32(packed as u32)
        .u32(0)
        .pad_to(FRAME_HEADER_BYTES);
    buf[..FRAME_HEADER_BYTES].copy_from_slice(&w.finish());
    let end = frame_blocks(packed) * BLOCK_BYTES;
    buf[FRAME_HEADER_BYTES + packed..end].fill(0);
    let mut out = buf[..end].to_vec();
    let crc = crc_with_hole(&out, CRC_AT);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Bytes an LZ4 literal length `n` takes beyond its token's nibble.
fn literal_length_bytes(n: usize) -> usize {
    if n < 15 {
        0
    } else {
        (n - 15) / 255 + 1
    }
}

/// Where the last sequence of the LZ4 block `packed` starts, and how many
/// literals it holds (the last sequence of a block is literals only).
fn last_sequence(packed: &[u8]) -> (usize, usize) {
    let mut pos = 0;
    loop {
        let start = pos;
        let token = packed[pos];
        pos += 1;
        let mut lits = (token >> 4) as usize;
        if lits == 15 {
            loop {
                let b = packed[pos];
                pos += 1;
                lits += b as usize;
                if b != 255 {
                    break;
                }
            }
        }
        pos += lits;
        if pos >= packed.len() {
            assert_eq!(pos, packed.len(), "an LZ4 block ends with its literals");
            return (start, lits);
        }
        pos += 2; // the match's offset
        if token & 15 == 15 {
            while packed[pos] == 255 {
                pos += 1;
            }
            pos += 1;
        }
    }
}

/// A proof, made from the first `prefix` bytes of a record's run alone,
/// that the run compresses into fewer blocks than it holds, so that the
/// whole run can be compressed later, after the engine's lock is let go
/// (meta/compress.rs): the LZ4 block of the prefix with the rest of the
/// run appended to its last literals is a valid LZ4 block of the whole
/// run, and [`prefix_frame`] builds it whenever the whole run's own LZ4
/// block does not fit. `None` if even that takes as many blocks as the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixProof {
    pub prefix: usize,
}

/// Bytes of the LZ4 block that [`prefix_frame`] makes: `packed` (the LZ4
/// block of a prefix) with `rest` more bytes in its last literals.
fn prefix_packed_len(packed: &[u8], rest: usize) -> usize {
    let (start, lits) = last_sequence(packed);
    start + 1 + literal_length_bytes(lits + rest) + lits + rest
}

/// Whether a run of `run_len` bytes (whole blocks) that starts with
/// `prefix` is sure to compress into fewer blocks than it holds, judged by
/// compressing only the prefix (a cheap look, under the engine's lock).
pub fn prove_by_prefix(prefix: &[u8], run_len: usize) -> Option<PrefixProof> {
    let nslots = run_len / BLOCK_BYTES;
    if nslots < 2 || prefix.is_empty() || prefix.len() > run_len {
        return None;
    }
    let packed = lz4_flex::block::compress(prefix);
    let len = prefix_packed_len(&packed, run_len - prefix.len());
    (frame_blocks(len) < nslots).then_some(PrefixProof {
        prefix: prefix.len(),
    })
}

/// The frame of `blocks` for a run proved compressible by `proof`: the
/// one [`compress_blocks_with`] makes with `method` (the same bytes) when
/// that fits, else the prefix's LZ4 block with the rest of the run as
/// literals, which the proof says fits. So a zstd mount may write an
/// LZ4 frame for such a run (every image that holds zstd frames reads
/// both): in practice zstd fits wherever LZ4's prefix did.
pub fn compress_proved(
    blocks: &[u8],
    proof: PrefixProof,
    method: impl Into<Method>,
    scratch: &mut Scratch,
) -> Vec<u8> {
    if let Some(f) = compress_blocks_with(method, &[blocks], scratch) {
        return f;
    }
    prefix_frame(blocks, proof.prefix).expect("the proof says the frame fits")
}

/// The frame of `blocks` whose LZ4 block is the LZ4 block of its first
/// `prefix` bytes with the rest appended to its last literals: a valid LZ4
/// block of the whole (any decoder takes it), `None` if it does not fit.
pub fn prefix_frame(blocks: &[u8], prefix: usize) -> Option<Vec<u8>> {
    let nslots = blocks.len() / BLOCK_BYTES;
    let rest = &blocks[prefix..];
    let packed = lz4_flex::block::compress(&blocks[..prefix]);
    let len = prefix_packed_len(&packed, rest.len());
    let m = frame_blocks(len);
    if nslots < 2 || m >= nslots {
        return None;
    }
    let (start, lits) = last_sequence(&packed);
    let total = lits + rest.len();
    let mut buf = Vec::with_capacity(m * BLOCK_BYTES);
    buf.resize(FRAME_HEADER_BYTES, 0);
    buf.extend_from_slice(&packed[..start]);
    buf.push(((total.min(15) as u8) << 4) | (packed[start] & 15));
    if total >= 15 {
        let mut n = total - 15;
        while n >= 255 {
            buf.push(255);
            n -= 255;
        }
        buf.push(n as u8);
    }
    buf.extend_from_slice(&packed[packed.len() - lits..]);
    buf.extend_from_slice(rest);
    assert_eq!(buf.len(), FRAME_HEADER_BYTES + len);
    buf.resize(m * BLOCK_BYTES, 0);
    Some(seal_frame(&mut buf, Codec::Lz4, len, nslots))
}

/// What a frame's first block says: (slots it decompresses to, blocks it
/// occupies, compressed bytes).
pub fn frame_size(first: &[u8], what: &str) -> Result<(usize, usize, usize)> {
    frame_head(first, what).map(|(_, nslots, m, len)| (nslots, m, len))
}

/// [`frame_size`] with the frame's codec first.
fn frame_head(first: &[u8], what: &str) -> Result<(Codec, usize, usize, usize)> {
    let mut r = Reader::new(first, what);
    if r.u32()? != FRAME_MAGIC {
        return Err(Error::corrupt(format!("{what}: not a compressed frame")));
    }
    let byte = r.u8()?;
    let Some(codec) = Codec::of_byte(byte) else {
        return Err(Error::corrupt(format!(
            "{what}: unknown codec {byte} (this build reads {CODEC_LZ4} lz4 and {CODEC_ZSTD} zstd)"
        )));
    };
    r.skip(3)?;
    let nslots = r.u32()? as usize;
    let len = r.u32()? as usize;
    let m = (FRAME_HEADER_BYTES + len).div_ceil(BLOCK_BYTES);
    if !(2..=crate::log::record::MAX_RECORD_PAYLOAD).contains(&nslots) || m >= nslots {
        return Err(Error::corrupt(format!(
            "{what}: frame of {nslots} slots in {m} blocks"
        )));
    }
    Ok((codec, nslots, m, len))
}

/// Verify and decompress a whole frame (`m` blocks, as `frame_size` says)
/// into its `nslots` blocks.
pub fn decompress(frame: &[u8], what: &str) -> Result<Vec<u8>> {
    let (codec, nslots, m, len) = frame_head(frame, what)?;
    if frame.len() < m * BLOCK_BYTES {
        return Err(Error::corrupt(format!("{what}: frame cut short")));
    }
    let frame = &frame[..m * BLOCK_BYTES];
    let stored = crate::codec::get_u32_at(frame, CRC_AT);
    if crc_with_hole(frame, CRC_AT) != stored {
        return Err(Error::corrupt(format!("{what}: frame checksum mismatch")));
    }
    let packed = &frame[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len];
    let out = match codec {
        Codec::Lz4 => {
            lz4_flex::block::decompress(packed, nslots * BLOCK_BYTES).map_err(|e| e.to_string())
        }
        Codec::Zstd => {
            zstd::bulk::decompress(packed, nslots * BLOCK_BYTES).map_err(|e| e.to_string())
        }
    }
    .map_err(|e| {
        Error::corrupt(format!(
            "{what}: {} frame does not decompress: {e}",
            codec.name()
        ))
    })?;
    if out.len() != nslots * BLOCK_BYTES {
        return Err(Error::corrupt(format!(
            "{what}: frame decompresses to {} bytes, not {nslots} blocks",
            out.len()
        )));
    }
    Ok(out)
}

/// `nblocks` blocks of xorshift noise, which LZ4 cannot shrink (the
/// tests here and in meta/compress.rs).
#[cfg(test)]
pub(crate) fn noise(seed: u64, nblocks: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..nblocks * BLOCK_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
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

    /// The frame made from a prefix's LZ4 block and the rest as literals
    /// is a frame like any other: it verifies and decompresses (with the
    /// reader every build has) to the whole run, for runs whose literal
    /// counts cross the nibble's 15 and the extension bytes' 255.
    #[test]
    fn prefix_frames_decompress_to_the_whole_run() {
        for (text_blocks, noise_blocks) in [(32, 0), (32, 1), (64, 200), (40, 984), (2, 0)] {
            let mut data = text(text_blocks);
            data.extend(noise(7, noise_blocks));
            for prefix in [text_blocks * BLOCK_BYTES, 100, 4096 + 17] {
                let prefix = prefix.min(data.len());
                let Some(f) = prefix_frame(&data, prefix) else {
                    assert!(prove_by_prefix(&data[..prefix], data.len()).is_none());
                    continue;
                };
                assert_eq!(
                    prove_by_prefix(&data[..prefix], data.len()),
                    Some(PrefixProof { prefix }),
                    "the proof and the frame agree"
                );
                assert!(f.len() < data.len() && f.len() % BLOCK_BYTES == 0);
                assert_eq!(
                    decompress(&f, "t").unwrap(),
                    data,
                    "{text_blocks}+{noise_blocks}"
                );
            }
        }
        // Noise proves nothing; nor does a run of one block.
        let n = noise(3, 64);
        assert!(prove_by_prefix(&n[..32 * BLOCK_BYTES], n.len()).is_none());
        assert!(prove_by_prefix(&text(1), BLOCK_BYTES).is_none());
    }

    /// A proved run gets exactly the frame [`compress`] makes whenever that
    /// one fits, so compressing later changes no byte of such records.
    #[test]
    fn proved_runs_get_the_usual_frame() {
        let mut scratch = Scratch::default();
        let mut mixed = text(64);
        mixed.extend(noise(11, 400));
        for data in [text(1024), text(64), mixed] {
            let proof = prove_by_prefix(&data[..32 * BLOCK_BYTES], data.len()).expect("text first");
            let f = compress_proved(&data, proof, Codec::Lz4, &mut scratch);
            assert_eq!(Some(&f), compress(&data).as_ref());
            assert_eq!(decompress(&f, "t").unwrap(), data);
            let z = compress_proved(&data, proof, Codec::Zstd, &mut scratch);
            assert_eq!(Some(&z), compress_with(Codec::Zstd, &data).as_ref());
            assert_eq!(decompress(&z, "t").unwrap(), data);
        }
    }

    /// Levels change the frame's size and time, never how it reads: each
    /// level's frame decompresses to the data, a higher level is no larger
    /// on text, and one scratch moved between levels makes the frames a
    /// fresh one makes at each.
    #[test]
    fn zstd_levels() {
        let data = text(512);
        let mut kept = Scratch::default();
        let mut sizes = Vec::new();
        for level in [1, 3, 9, 19, 3, 1] {
            let m = Method {
                codec: Codec::Zstd,
                level,
            };
            let f = compress_blocks_with(m, &[&data], &mut kept).expect("text shrinks");
            let fresh = compress_blocks_with(m, &[&data], &mut Scratch::default());
            assert_eq!(Some(&f), fresh.as_ref(), "level {level}");
            assert_eq!(f[4], CODEC_ZSTD);
            assert_eq!(decompress(&f, "t").unwrap(), data);
            sizes.push(frame_size(&f, "t").unwrap().2);
        }
        assert!(sizes[3] <= sizes[0], "{sizes:?}");
        assert_eq!(Method::from(Codec::Zstd).name(), "zstd");
        let m = Method {
            codec: Codec::Zstd,
            level: 9,
        };
        assert_eq!(m.name(), "zstd:9");
    }

    /// zstd frames: codec byte 2, the same header and checksum, smaller
    /// than LZ4's on text, raw when they do not shrink; a scratch kept
    /// across codecs makes the same frames as a fresh one.
    #[test]
    fn zstd_round_trip() {
        let mut scratch = Scratch::default();
        for n in [2, 3, 17, 1024] {
            let data = text(n);
            let f = compress_with(Codec::Zstd, &data).expect("text shrinks");
            assert_eq!(f[4], CODEC_ZSTD);
            assert!(f.len() <= compress(&data).unwrap().len());
            assert_eq!(frame_size(&f, "t").unwrap().0, n);
            assert_eq!(decompress(&f, "t").unwrap(), data);
            let parts: Vec<&[u8]> = data.chunks(BLOCK_BYTES).collect();
            assert_eq!(
                compress_blocks_with(Codec::Lz4, &parts, &mut scratch),
                compress(&data)
            );
            assert_eq!(
                compress_blocks_with(Codec::Zstd, &parts, &mut scratch),
                Some(f)
            );
        }
        assert!(compress_with(Codec::Zstd, &noise(5, 8)).is_none());
        assert!(compress_with(Codec::Zstd, &text(1)).is_none());
    }

    /// A codec byte this build does not know is corruption, named with
    /// the frame, even when the checksum (which covers it) agrees.
    #[test]
    fn unknown_codec_is_refused() {
        let mut f = compress_with(Codec::Zstd, &text(8)).unwrap();
        f[4] = 3;
        let crc = crc_with_hole(&f, CRC_AT);
        f[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        let e = decompress(&f, "frame at block 77").unwrap_err().to_string();
        assert!(
            e.contains("frame at block 77") && e.contains("unknown codec 3"),
            "{e}"
        );
    }

    #[test]
    fn damage_is_refused() {
        let data = text(8);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let f = compress_with(codec, &data).unwrap();
            for at in [0, 4, 8, 12, 20, FRAME_HEADER_BYTES + 3] {
                let mut bad = f.clone();
                bad[at] ^= 0x40;
                assert!(decompress(&bad, "t").is_err(), "{codec:?} byte {at}");
            }
            assert!(decompress(&f[..BLOCK_BYTES / 2], "t").is_err());
        }
    }
}
