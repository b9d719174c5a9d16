//! The write-ahead file: a local file that holds what flushes covered
//! until the objects it went into are stored, so that an fsync costs an
//! append and an fdatasync on local disk instead of uploading segments
//! whole (`device.rs` says when the objects go up; docs/OBJECT_STORE.md).
//!
//! Layout, all integers little-endian:
//! * a header: `LSFSWAL1`, the length `n` of what follows the checksum
//!   (u32), its CRC-32C (u32), then `n` bytes of JSON ([`Header`]): whose
//!   file it is (the store's URL and the file system's id) and the
//!   generation, which changes at every restart of the file;
//! * records, one per flush that had something to cover: magic `LWR1`
//!   (u32), sequence number (u64, 1 for the first record of a
//!   generation), payload length (u64), the payload, and a CRC-32C (u32)
//!   of the generation and every byte of the record before it. The
//!   payload is a list of ranges, each a device offset (u64), a length
//!   (u32) and the bytes.
//!
//! The file keeps its length across restarts and grows in steps of
//! [`GROW`] bytes of zeros ahead of the records: an fdatasync of a record
//! appended past the file's end, or into a hole, must also commit the
//! host's allocation (on ext4 a journal commit), and that cost every fsync
//! once more (the same as an image file's holes, lsfs-core's
//! `device/fill_ahead.rs`). Whatever lies past the last record (zeros, an
//! earlier generation's records) is not this generation's, by its
//! sequence number or its checksum; and every write of a header or a
//! record ends with a record head's worth of zeros, so that what follows
//! the last whole record is either those zeros or the head of a record
//! begun and never finished, which is then reported as a torn tail.
//!
//! A record is acknowledged only once it and everything before it were
//! fdatasynced, so the first record that is short, has a wrong magic, a
//! wrong sequence number or a wrong checksum ends what counts: it is a
//! torn tail of a flush that never returned, and is ignored. The
//! generation in every checksum keeps records of an earlier generation,
//! should any survive a restart, from being taken for this one's.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"LSFSWAL1";
const REC_MAGIC: u32 = u32::from_le_bytes(*b"LWR1");
/// Magic, sequence number, payload length.
const REC_HEAD: usize = 4 + 8 + 8;

/// Default bound on the file: past it, a flush stores every changed
/// object and restarts the file.
pub const DEFAULT_WAL_BYTES: u64 = 64 << 20;

/// Whose write-ahead file it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The store's URL, as the mount named it.
    pub url: String,
    /// The file system's id (its superblock's `fs_id`).
    pub fs_id: u64,
    /// This file's id, random when the file is made; the lease names it.
    pub id: u64,
    pub generation: u64,
}

/// One flush's ranges: (device offset, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub ranges: Vec<(u64, Vec<u8>)>,
}

/// What an existing file held when it was opened.
#[derive(Debug, Default)]
pub struct Found {
    pub header: Option<Header>,
    pub records: Vec<Record>,
    /// Bytes after the last whole record that a flush began and never
    /// finished (a torn tail), ignored.
    pub torn_bytes: u64,
    /// Bytes of the header and the whole records: where the next record
    /// would go. The file goes on past it (zeros, older records).
    pub end: u64,
}

pub struct Wal {
    file: File,
    pub path: PathBuf,
    pub header: Header,
    /// Bytes of the header and this generation's records.
    len: u64,
    /// Bytes of the file: `len` and what lies past it.
    size: u64,
    next_seq: u64,
}

/// The file grows by this many bytes of zeros when a record would pass
/// its end, so that only one fdatasync in so many bytes of records
/// commits an allocation.
pub const GROW: u64 = 4 << 20;

/// A random id, without a crate for it: the standard library seeds each
/// `RandomState` from the system's randomness.
pub fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

fn crc(generation: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&generation.to_le_bytes()), bytes)
}

fn encode_header(h: &Header) -> Vec<u8> {
    let json = serde_json::to_vec(h).expect("a header serializes");
    let mut out = Vec::with_capacity(16 + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// Parse a whole file's bytes.
pub fn parse(path: &Path, b: &[u8]) -> Result<Found, String> {
    if b.is_empty() {
        return Ok(Found::default());
    }
    let p = path.display();
    if b.len() < 16 || &b[..8] != MAGIC {
        return Err(format!(
            "{p} is not an lsfs write-ahead file (no {} magic); not touching it",
            String::from_utf8_lossy(MAGIC)
        ));
    }
    let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let stored = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let json = b.get(16..16 + n).ok_or_else(|| {
        format!(
            "{p}: its header is cut short ({} of {n} bytes)",
            b.len() - 16
        )
    })?;
    if crc32c::crc32c(json) != stored {
        return Err(format!(
            "{p}: its header is damaged (checksum mismatch); the writes it holds cannot be \
             matched to a file system"
        ));
    }
    let header: Header =
        serde_json::from_slice(json).map_err(|e| format!("{p}: its header is damaged: {e}"))?;
    let mut records = Vec::new();
    let mut at = 16 + n;
    let mut seq = 1;
    while let Some(r) = record_at(b, at, seq, header.generation) {
        at += REC_HEAD + r.1 + 4;
        records.push(r.0);
        seq += 1;
    }
    Ok(Found {
        header: Some(header),
        records,
        torn_bytes: torn_at(b, at, seq),
        end: at as u64,
    })
}

/// The bytes at `at`, after the last whole record, that look like record
/// `seq` begun and never finished (a flush that never returned): its head
/// is there, the rest is short or fails its checksum. The zeros every
/// write ends with are not torn, nor is anything else that is not such a
/// head.
fn torn_at(b: &[u8], at: usize, seq: u64) -> u64 {
    let Some(head) = b.get(at..at + REC_HEAD) else {
        return if b[at..].iter().all(|&x| x == 0) {
            0
        } else {
            (b.len() - at) as u64
        };
    };
    let magic = u32::from_le_bytes(head[..4].try_into().unwrap());
    let this_seq = u64::from_le_bytes(head[4..12].try_into().unwrap());
    if magic != REC_MAGIC || this_seq != seq {
        return 0;
    }
    let claimed = u64::from_le_bytes(head[12..20].try_into().unwrap());
    claimed
        .saturating_add((REC_HEAD + 4) as u64)
        .min((b.len() - at) as u64)
}

/// Record `seq` of `ranges`, its checksum seeded with `seed` (the file's
/// generation; for records kept in the store, `store_log.rs`, the file
/// system's id).
pub fn encode_record(seq: u64, seed: u64, ranges: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let payload: usize = ranges.iter().map(|(_, b)| 12 + b.len()).sum();
    let mut r = Vec::with_capacity(REC_HEAD + payload + 4);
    r.extend_from_slice(&REC_MAGIC.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(payload as u64).to_le_bytes());
    for (off, b) in ranges {
        r.extend_from_slice(&off.to_le_bytes());
        r.extend_from_slice(&(b.len() as u32).to_le_bytes());
        r.extend_from_slice(b);
    }
    let c = crc(seed, &r);
    r.extend_from_slice(&c.to_le_bytes());
    r
}

/// `b` decoded if it is exactly one whole record `seq` made with `seed`
/// ([`encode_record`]).
pub fn decode_record(b: &[u8], seq: u64, seed: u64) -> Option<Record> {
    let (r, len) = record_at(b, 0, seq, seed)?;
    (REC_HEAD + len + 4 == b.len()).then_some(r)
}

/// The record at `at` if it is whole and is record `seq` of `generation`,
/// with its payload's length.
fn record_at(b: &[u8], at: usize, seq: u64, generation: u64) -> Option<(Record, usize)> {
    let head = b.get(at..at + REC_HEAD)?;
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
    if u32::from_le_bytes(head[..4].try_into().unwrap()) != REC_MAGIC || u64_at(4) != seq {
        return None;
    }
    let len = usize::try_from(u64_at(12)).ok()?;
    let end = at.checked_add(REC_HEAD)?.checked_add(len)?;
    let whole = b.get(at..end.checked_add(4)?)?;
    let stored = u32::from_le_bytes(whole[whole.len() - 4..].try_into().unwrap());
    if crc(generation, &whole[..whole.len() - 4]) != stored {
        return None;
    }
    let mut p = &b[at + REC_HEAD..end];
    let mut ranges = Vec::new();
    while !p.is_empty() {
        // A checksummed payload that does not parse was not written by
        // this code: taken as the end, like any other damage.
        let off = u64::from_le_bytes(p.get(..8)?.try_into().unwrap());
        let n = u32::from_le_bytes(p.get(8..12)?.try_into().unwrap()) as usize;
        ranges.push((off, p.get(12..12 + n)?.to_vec()));
        p = &p[12 + n..];
    }
    Some((Record { seq, ranges }, len))
}

impl Wal {
    /// Open (or create) the file at `path`, locked against any other
    /// process, and read what it holds. The file is not changed: the
    /// caller replays what it found, then [`Wal::restart`]s it.
    pub fn open(path: &Path) -> Result<(Wal, Found), String> {
        let p = path.display();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("object_wal {p}: {e}"))?;
        // SAFETY: flock on a descriptor this function owns; no memory is
        // shared with the kernel.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                format!("object_wal {p} is in use by another mount")
            } else {
                format!("object_wal {p}: locking it: {e}")
            });
        }
        let mut b = Vec::new();
        file.read_to_end(&mut b)
            .map_err(|e| format!("object_wal {p}: {e}"))?;
        // The file's name must outlive a crash as its records do: a file
        // made just now is not durable until its directory is.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| format!("object_wal {p}: syncing its directory: {e}"))?;
        }
        let found = parse(path, &b)?;
        let header = found.header.clone().unwrap_or(Header {
            url: String::new(),
            fs_id: 0,
            id: random_id(),
            generation: 0,
        });
        Ok((
            Wal {
                file,
                path: path.to_path_buf(),
                header,
                // Where the next record would go; a restart comes first
                // anyway (the caller's replay, then `restart`).
                len: found.end,
                size: b.len() as u64,
                next_seq: 1,
            },
            found,
        ))
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.next_seq == 1
    }

    /// Start the next generation, empty, for file system `fs_id` at `url`:
    /// everything the file held is in the store.
    ///
    /// The file is not cut: its records stay where they are and are no
    /// longer this generation's (their checksums are seeded with theirs),
    /// and the next records are written over them, in blocks the host has
    /// allocated already.
    pub fn restart(&mut self, url: &str, fs_id: u64) -> std::io::Result<()> {
        self.header.url = url.to_string();
        self.header.fs_id = fs_id;
        self.header.generation += 1;
        let mut h = encode_header(&self.header);
        let len = h.len() as u64;
        self.grow_to(len + REC_HEAD as u64)?;
        h.extend_from_slice(&[0; REC_HEAD]);
        self.file.write_all_at(&h, 0)?;
        // Until this returns, the old header and records may still be
        // found, and they are all in the store.
        self.file.sync_data()?;
        self.len = len;
        self.next_seq = 1;
        Ok(())
    }

    /// Grow the file with zeros to the next multiple of [`GROW`] past
    /// `end`, if `end` is past the file's end.
    fn grow_to(&mut self, end: u64) -> std::io::Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        if end <= self.size {
            return Ok(());
        }
        let target = end.div_ceil(GROW) * GROW;
        while self.size < target {
            let n = (target - self.size).min(ZEROS.len() as u64) as usize;
            self.file.write_all_at(&ZEROS[..n], self.size)?;
            self.size += n as u64;
        }
        Ok(())
    }

    /// Append one record of `ranges` and fdatasync it; returns its bytes.
    pub fn append(&mut self, ranges: &[(u64, Vec<u8>)]) -> std::io::Result<u64> {
        let mut r = encode_record(self.next_seq, self.header.generation, ranges);
        let n = r.len() as u64;
        // Made durable by this record's fdatasync: one allocation
        // committed for the next GROW bytes of records.
        self.grow_to(self.len + n + REC_HEAD as u64)?;
        r.extend_from_slice(&[0; REC_HEAD]);
        // Appended at the end of what counts: whatever lies there (zeros, a
        // torn flush's bytes, an earlier generation's records) is not this
        // generation's.
        self.file.write_all_at(&r, self.len)?;
        self.file.sync_data()?;
        self.len += n;
        self.next_seq += 1;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_torn_tail_is_ignored() {
        let dir = std::env::temp_dir().join(format!("lsfs-wal-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w");
        let _ = std::fs::remove_file(&path);
        let (mut w, found) = Wal::open(&path).unwrap();
        assert!(found.header.is_none() && found.records.is_empty());
        w.restart("memory://x", 7).unwrap();
        w.append(&[(4096, vec![1; 10]), (0, vec![2; 3])]).unwrap();
        w.append(&[(8192, vec![3; 5])]).unwrap();
        let end = w.len() as usize;
        drop(w);
        let whole = std::fs::read(&path).unwrap();
        assert_eq!(whole.len() as u64, GROW, "grown by zeros");
        assert!(whole[end..].iter().all(|&x| x == 0));
        assert_eq!(
            parse(&path, &whole).unwrap().torn_bytes,
            0,
            "zeros are not torn"
        );
        let b = whole[..end].to_vec();
        let f = parse(&path, &b).unwrap();
        assert_eq!(f.header.as_ref().unwrap().fs_id, 7);
        assert_eq!(f.records.len(), 2);
        assert_eq!(
            f.records[0].ranges,
            vec![(4096, vec![1; 10]), (0, vec![2; 3])]
        );
        assert_eq!(f.torn_bytes, 0);
        // Cut the last record short, or change one of its bytes: only the
        // first counts.
        for bad in [b[..b.len() - 1].to_vec(), {
            let mut x = b.clone();
            let n = x.len();
            x[n - 6] ^= 1;
            x
        }] {
            let f = parse(&path, &bad).unwrap();
            assert_eq!(f.records.len(), 1);
            assert!(f.torn_bytes > 0);
        }
        // Another generation's records are not this one's.
        let mut h = f.header.clone().unwrap();
        h.generation += 1;
        let mut x = encode_header(&h);
        x.extend_from_slice(&b[encode_header(f.header.as_ref().unwrap()).len()..]);
        assert!(parse(&path, &x).unwrap().records.is_empty());
        // A restart keeps the file's length; the old records are not the
        // new generation's, and new records are written over them.
        let (mut w, found) = Wal::open(&path).unwrap();
        assert_eq!(found.records.len(), 2);
        w.restart("memory://x", 7).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), GROW, "not cut");
        let again = parse(&path, &std::fs::read(&path).unwrap()).unwrap();
        assert!(again.records.is_empty(), "{:?}", again.records);
        assert_eq!(
            again.torn_bytes, 0,
            "an earlier generation's records are not torn"
        );
        w.append(&[(0, vec![9; 7])]).unwrap();
        drop(w);
        let again = parse(&path, &std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(again.records.len(), 1);
        assert_eq!(again.records[0].ranges, vec![(0, vec![9; 7])]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), GROW);
        assert!(parse(&path, b"hello world, not a wal")
            .unwrap_err()
            .contains("not an lsfs write-ahead file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
