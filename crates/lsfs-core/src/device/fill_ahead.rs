//! Zeros written into the holes of a sparse image file just ahead of the
//! log, so that an fsync does not also commit the host's allocation.
//!
//! An image file is sparse: `mkfs` only sets its size, and a discard
//! punches freed segments out again. The log writes every block somewhere
//! new, so without this nearly every record of an fsync lands in a hole,
//! and the `fdatasync` that makes it durable must also commit the host file
//! system's allocation of those blocks (on ext4, a journal commit: a few
//! more blocks and a cache flush before the fsync returns). Measured on a
//! 4 GiB image through the mount, 4 KiB random writes with an fsync each
//! ran at 2,693–2,795 a second on the sparse image against 4,207–4,552 on
//! the same image made dense beforehand (2026-11-27, docs/PERFORMANCE.md).
//!
//! So before each flush the device looks, after the end of every write
//! since the last flush, for holes in the next [`WINDOW`] bytes, and when
//! the nearest lies within half of it, writes zeros into them. That flush commits the allocation once (it had to
//! commit the record's own blocks anyway); the fsyncs that follow, until
//! the log has written through the window, find their blocks allocated and
//! written and commit nothing but their data. The cost is the window's
//! zeros, written once per half window of log that lands in a hole, not
//! per fsync: about one 2 MiB write per 256 fsyncs of 8 KiB. In host
//! bytes that costs nothing: each commit it saves wrote a few blocks too
//! (the host disk wrote 16.4 KiB per 4 KiB write and fsync without the fill,
//! 16.7 KiB with it). A bulk writer, which writes 512 KiB or more between
//! two flushes, commits once per flush either way and is not filled after.
//!
//! **Why this is safe.** A hole holds nothing live: every block the file
//! system keeps was written, and writing allocates. Writes reach the device
//! one at a time and in order (device/io_queue.rs runs one executor), and a
//! flush runs where it stands in that order, so no write the file system
//! issued before the flush can be in flight in a hole, and every write after
//! it lands on the zeros and replaces them. Reads of a hole and of zeros
//! return the same bytes. The host's `SEEK_HOLE` counts data written but not
//! yet written back as data (ext4, xfs, btrfs and tmpfs all do), so
//! buffered writes are never mistaken for holes.
//!
//! Block devices have no holes: only image files fill. `LSFS_FILL_AHEAD=0`
//! turns it off. An error while filling (a host that cannot seek holes, or
//! is out of space) only turns it off, with a note in the log: the fill is
//! an optimization, and the record's own write says what really failed.

use std::fs::File;
use std::os::unix::io::AsRawFd;

/// How far past a write the holes are filled, once the nearest one is
/// within half of it: so a fill allocates at least half the window (two
/// segments of the default geometry, 512 blocks of 4 KiB), and the fsyncs
/// of the log's next 2 MiB or more commit no allocation.
pub const WINDOW: u64 = 4 << 20;

/// A run this long between two flushes is not filled after ([`FillAhead::fill`]).
const LONG_RUN: u64 = WINDOW / 8;

/// Write ends remembered between two flushes: one per stream the log
/// writes at once (the log's own and three data streams), with room for
/// the cleaner and superblocks. Beyond it the oldest is forgotten, which
/// only costs a commit.
const MAX_ENDS: usize = 16;

/// `O_DIRECT` alignment of offsets and lengths: the zeros go where the
/// device's own writes would go direct.
const ALIGN: u64 = 4096;

/// `LSFS_FILL_AHEAD=0` keeps image files as sparse as the log leaves them.
pub fn wanted() -> bool {
    std::env::var("LSFS_FILL_AHEAD").map_or(true, |v| v != "0")
}

/// A run of writes since the last flush, each starting where the one
/// before ended: where it ends, and how many bytes it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    end: u64,
    bytes: u64,
}

/// The runs of writes since the last flush.
pub struct FillAhead {
    runs: Vec<Run>,
}

impl Default for FillAhead {
    fn default() -> Self {
        Self::new()
    }
}

impl FillAhead {
    pub fn new() -> FillAhead {
        FillAhead { runs: Vec::new() }
    }

    /// Remember that a write ended at `end`. A write that continues a
    /// run extends it, so a stream is one run however many records it
    /// writes between flushes.
    pub fn note_write(&mut self, offset: u64, end: u64) {
        if let Some(r) = self.runs.iter_mut().find(|r| r.end == offset) {
            r.end = end;
            r.bytes += end - offset;
            return;
        }
        if self.runs.iter().any(|r| r.end == end) {
            return;
        }
        if self.runs.len() == MAX_ENDS {
            self.runs.remove(0);
        }
        self.runs.push(Run {
            end,
            bytes: end - offset,
        });
    }

    /// Fill the holes within [`WINDOW`] after the end of every short run,
    /// found with `file`'s `SEEK_HOLE`, through `write` (the device's own
    /// write, direct where it can: the pieces are block-aligned); forget
    /// the runs. Returns the bytes filled.
    ///
    /// A run of [`LONG_RUN`] or more between two flushes is a bulk writer
    /// (a sequential write, a checkpoint): the window would save it one
    /// commit or two for as many bytes of zeros, so it is left alone.
    pub fn fill(
        &mut self,
        file: &File,
        size: u64,
        write: &mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let runs = std::mem::take(&mut self.runs);
        let mut filled = 0;
        for r in runs.into_iter().filter(|r| r.bytes < LONG_RUN) {
            filled += fill_after(file, r.end, size, write)?;
        }
        Ok(filled)
    }
}

/// Fill the holes in the window after `end`, if the nearest lies within
/// half of it: filling whatever the window's far edge just reached would
/// allocate a little at every flush, and so commit at every flush again.
fn fill_after(
    file: &File,
    end: u64,
    size: u64,
    write: &mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    static ZEROS: [u8; 1 << 20] = [0; 1 << 20];
    let limit = (end + WINDOW).min(size) / ALIGN * ALIGN;
    // The end of the file counts as a hole: nothing lies past it.
    let mut next = seek(file, end.div_ceil(ALIGN) * ALIGN, libc::SEEK_HOLE)?;
    if !matches!(next, Some(h) if h < (end + WINDOW / 2).min(limit)) {
        return Ok(0);
    }
    let mut filled = 0;
    while let Some(hole) = next.filter(|&h| h < limit) {
        let hole = hole.div_ceil(ALIGN) * ALIGN;
        let data = seek(file, hole, libc::SEEK_DATA)?.unwrap_or(size);
        let stop = (data / ALIGN * ALIGN).min(limit);
        let mut at = hole;
        while at < stop {
            let n = (stop - at).min(ZEROS.len() as u64);
            write(at, &ZEROS[..n as usize])?;
            at += n;
        }
        filled += stop.saturating_sub(hole);
        let after = stop.max(hole + ALIGN);
        if after >= limit {
            break;
        }
        next = seek(file, after, libc::SEEK_HOLE)?;
    }
    Ok(filled)
}

/// `lseek(fd, at, whence)` for `SEEK_HOLE` or `SEEK_DATA`; `None` when
/// there is no data at or after `at` (ENXIO).
fn seek(file: &File, at: u64, whence: libc::c_int) -> std::io::Result<Option<u64>> {
    // SAFETY: lseek on a descriptor we own; it only moves the file offset,
    // which this device never uses (every access is positioned).
    let r = unsafe { libc::lseek(file.as_raw_fd(), at as libc::off_t, whence) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

    /// `f.fill` writing buffered, as a device without direct I/O does.
    fn fill(f: &mut FillAhead, file: &File, size: u64) -> std::io::Result<u64> {
        f.fill(file, size, &mut |at, b| file.write_all_at(b, at))
    }

    fn allocated(file: &File) -> u64 {
        file.metadata().unwrap().blocks() * 512
    }

    /// After a write into a sparse file, the window past it is allocated
    /// and reads as zeros; data further on, and data inside the window,
    /// is untouched; a second fill finds nothing to do.
    #[test]
    fn fills_the_window_after_a_write_and_nothing_else() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("img");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let size = 16 << 20;
        file.set_len(size).unwrap();
        // Data inside the window (must survive) and just past it.
        let inside = vec![0xA5u8; 8192];
        file.write_all_at(&inside, (1 << 20) + 4096 * 3).unwrap();
        file.write_all_at(&[7u8; 4096], (1 << 20) + WINDOW + 4096 * 4)
            .unwrap();
        file.write_all_at(&[1u8; 4096], 1 << 20).unwrap();
        let mut f = FillAhead::new();
        f.note_write(1 << 20, (1 << 20) + 4096);
        let before = allocated(&file);
        let filled = match fill(&mut f, &file, size) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("no SEEK_HOLE under /var/tmp ({e}): nothing to check");
                return;
            }
        };
        assert_eq!(filled, WINDOW - 8192, "the window less the data in it");
        assert!(
            allocated(&file) >= before + filled,
            "the holes are allocated"
        );
        let mut got = vec![9u8; (WINDOW + 8 * 4096) as usize];
        file.read_exact_at(&mut got, 1 << 20).unwrap();
        assert!(got[..4096].iter().all(|&b| b == 1), "the write");
        assert!(got[4096..3 * 4096].iter().all(|&b| b == 0));
        assert!(
            got[3 * 4096..5 * 4096].iter().all(|&b| b == 0xA5),
            "data inside kept"
        );
        assert!(got[5 * 4096..(WINDOW + 4096) as usize]
            .iter()
            .all(|&b| b == 0));
        let past = (WINDOW + 4 * 4096) as usize;
        assert!(
            got[past..past + 4096].iter().all(|&b| b == 7),
            "data past kept"
        );
        // Past the window it stays a hole.
        assert_eq!(
            seek(&file, (1 << 20) + WINDOW + 4096, libc::SEEK_HOLE).unwrap(),
            Some((1 << 20) + WINDOW + 4096)
        );
        f.note_write(1 << 20, (1 << 20) + 4096);
        assert_eq!(fill(&mut f, &file, size).unwrap(), 0, "nothing left");
        // The log moves on a little: the hole at the window's far edge is
        // not worth an allocation yet; past half the window it is.
        f.note_write(1 << 20, (1 << 20) + 8 * 4096);
        assert_eq!(fill(&mut f, &file, size).unwrap(), 0, "not yet");
        let half = (1 << 20) + WINDOW / 2 + 2 * 4096;
        f.note_write(half - 4096, half);
        assert!(fill(&mut f, &file, size).unwrap() >= WINDOW / 2 - 4 * 4096);
        // A long run (a bulk writer) is not filled after.
        let bulk = 8 << 20;
        f.note_write(bulk, bulk + LONG_RUN);
        assert_eq!(fill(&mut f, &file, size).unwrap(), 0, "bulk");
        // A write near the end fills only up to the end.
        f.note_write(size - 8192, size - 4096);
        assert_eq!(fill(&mut f, &file, size).unwrap(), 4096);
        assert_eq!(file.metadata().unwrap().len(), size, "size kept");
    }

    #[test]
    fn a_continuing_write_replaces_its_end() {
        let mut f = FillAhead::new();
        f.note_write(0, 4096);
        f.note_write(4096, 8192);
        f.note_write(1 << 30, (1 << 30) + 4096);
        let ends: Vec<_> = f.runs.iter().map(|r| (r.end, r.bytes)).collect();
        assert_eq!(ends, vec![(8192, 8192), ((1 << 30) + 4096, 4096)]);
        for i in 0..40u64 {
            f.note_write(i << 24, (i << 24) + 4096);
        }
        assert_eq!(f.runs.len(), MAX_ENDS);
    }
}
