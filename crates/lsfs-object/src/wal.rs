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
//! A record is acknowledged only once it and everything before it were
//! fdatasynced, so the first record that is short, has a wrong magic, a
//! wrong sequence number or a wrong checksum ends what counts: it is a
//! torn tail of a flush that never returned, and is ignored. The
//! generation in every checksum keeps records of an earlier generation,
//! should any survive a restart, from being taken for this one's.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
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
    /// Bytes after the last whole record (a torn flush), ignored.
    pub torn_bytes: u64,
}

pub struct Wal {
    file: File,
    pub path: PathBuf,
    pub header: Header,
    len: u64,
    next_seq: u64,
}

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
        torn_bytes: (b.len() - at) as u64,
    })
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
                len: b.len() as u64,
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
    pub fn restart(&mut self, url: &str, fs_id: u64) -> std::io::Result<()> {
        self.header.url = url.to_string();
        self.header.fs_id = fs_id;
        self.header.generation += 1;
        let h = encode_header(&self.header);
        self.file.set_len(0)?;
        self.file.write_all_at(&h, 0)?;
        // The truncation and the header together: until this returns, the
        // old records may still be found, and they are all in the store.
        self.file.sync_data()?;
        self.len = h.len() as u64;
        self.next_seq = 1;
        Ok(())
    }

    /// Append one record of `ranges` and fdatasync it; returns its bytes.
    pub fn append(&mut self, ranges: &[(u64, Vec<u8>)]) -> std::io::Result<u64> {
        let r = encode_record(self.next_seq, self.header.generation, ranges);
        let mut f = &self.file;
        // Appended at the end of what counts: whatever a torn flush left
        // there was cut off by the restart at open.
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(self.len))?;
        f.write_all(&r)?;
        self.file.sync_data()?;
        self.len += r.len() as u64;
        self.next_seq += 1;
        Ok(r.len() as u64)
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
        drop(w);
        let b = std::fs::read(&path).unwrap();
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
        assert!(parse(&path, b"hello world, not a wal")
            .unwrap_err()
            .contains("not an lsfs write-ahead file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
