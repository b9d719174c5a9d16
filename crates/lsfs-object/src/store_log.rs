//! Flush records kept in the store itself, as objects of their own
//! (`object_wal = "store"`): what the write-ahead file does on local disk
//! (`wal.rs`), but durable without the machine. A flush PUTs one small
//! object holding the byte ranges written since the last flush, instead
//! of uploading the segments they went into whole; the segments go up
//! later, by the same rules as with the file (`device.rs`), and then the
//! records are deleted.
//!
//! Objects, under the file system's prefix: `log/N`, N the record's
//! number in decimal, 20 digits (so that names sort as numbers). Each
//! holds one record in the file's record layout (`wal::encode_record`):
//! magic `LWR1`, N, the payload's length, the payload (ranges: device
//! offset, length, bytes) and a CRC-32C seeded with the file system's
//! id, so that records of a file system made again at the same place are
//! never taken for this one's.
//!
//! Numbers only grow: a mount starts after the highest it finds. A PUT is
//! atomic, so a record is whole or absent, never torn; it is created only
//! if absent (a conditional PUT), so two writers that both believed they
//! held the lease could not both add record N. Records are deleted in
//! ascending order once the objects they went into are stored, so what a
//! crash leaves is always the newest ones, whose replay over the stored
//! objects changes nothing they do not already hold or that a newer
//! record does not write again.

use crate::target::Target;
use crate::wal::{self, Record};
use object_store::{PutMode, PutOptions, PutPayload};
use tokio::runtime::Runtime;

/// Directory of the records under the prefix.
pub const DIR: &str = "log";

/// Records in the store not yet folded into the objects: what a flush
/// appends, what an upload deletes.
pub struct StoreLog {
    fs_id: u64,
    /// The next record's number.
    next: u64,
    /// Numbers written since the last restart, ascending.
    live: Vec<u64>,
    /// Their bytes.
    bytes: u64,
}

fn name(n: u64) -> String {
    format!("{DIR}/{n:020}")
}

/// The records left in the store for file system `fs_id`, oldest first,
/// and the highest number found (0 if none). Records that do not decode,
/// or belong to another file system, are reported, not replayed: a crash
/// cannot make one (PUTs are whole), so such an object is damage or not
/// ours, and the caller refuses to go on rather than guess.
/// `fs_id` is asked only if there are records (reading it costs the
/// superblocks' GETs).
pub fn find(
    t: &Target,
    rt: &Runtime,
    fs_id: impl FnOnce() -> Result<u64, String>,
) -> Result<(Vec<Record>, u64), String> {
    let dir = t.path(DIR);
    let metas = rt
        .block_on(t.store.list_with_delimiter(Some(&dir)))
        .map_err(|e| format!("{}: listing {DIR}/: {e}", t.url))?
        .objects;
    let mut numbered: Vec<(u64, object_store::path::Path)> = Vec::new();
    for m in metas {
        let leaf = m.location.filename().unwrap_or_default().to_string();
        let Ok(n) = leaf.parse::<u64>() else {
            return Err(format!(
                "{}: {} is not a flush record of lsfs (records are named by number)",
                t.url, m.location
            ));
        };
        numbered.push((n, m.location));
    }
    numbered.sort();
    let high = numbered.last().map_or(0, |(n, _)| *n);
    if numbered.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let fs_id = fs_id()?;
    let mut records = Vec::with_capacity(numbered.len());
    let mut expect = numbered.first().map_or(0, |(n, _)| *n);
    for (n, path) in numbered {
        if n != expect {
            // Deletes go oldest first and records are numbered without
            // gaps, so what is left is a run: a gap means damage.
            return Err(format!(
                "{}: flush record {n} follows {} with records missing between them; \
                 not replaying a log with a hole",
                t.url,
                expect - 1
            ));
        }
        let b = rt
            .block_on(async { t.store.get(&path).await?.bytes().await })
            .map_err(|e| format!("{}: reading {path}: {e}", t.url))?;
        let Some(r) = wal::decode_record(&b, n, fs_id) else {
            return Err(format!(
                "{}: {path} is not a whole flush record of this file system (id {fs_id:#x}); \
                 delete it to give it up",
                t.url
            ));
        };
        records.push(r);
        expect = n + 1;
    }
    Ok((records, high))
}

impl StoreLog {
    /// A log for file system `fs_id` whose records start after `high`.
    pub fn new(fs_id: u64, high: u64) -> StoreLog {
        StoreLog {
            fs_id,
            next: high + 1,
            live: Vec::new(),
            bytes: 0,
        }
    }

    /// Bytes of the records written since the last restart.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether no record was written since the last restart.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Store one record of `ranges`; returns its bytes. Returns when the
    /// store has it (a PUT is durable when it returns). On an error the
    /// number is not used up.
    pub fn append(
        &mut self,
        t: &Target,
        rt: &Runtime,
        ranges: &[(u64, Vec<u8>)],
    ) -> Result<u64, String> {
        let body = wal::encode_record(self.next, self.fs_id, ranges);
        let n = body.len() as u64;
        let path = t.path(&name(self.next));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        rt.block_on(t.store.put_opts(&path, PutPayload::from(body), opts))
            .map_err(|e| format!("storing flush record {path}: {e}"))?;
        self.live.push(self.next);
        self.next += 1;
        self.bytes += n;
        Ok(n)
    }

    /// Delete the records written since the last restart, oldest first:
    /// everything they held is in the objects now, whose superblocks name
    /// file system `fs_id`; the records after seed their checksums with it,
    /// as a replay will (it reads the id from the stored superblocks).
    /// Returns how many were deleted.
    pub fn restart(&mut self, t: &Target, rt: &Runtime, fs_id: u64) -> Result<u64, String> {
        self.fs_id = fs_id;
        let mut done = 0;
        while let Some(&n) = self.live.first() {
            delete(t, rt, n)?;
            self.live.remove(0);
            done += 1;
        }
        self.bytes = 0;
        Ok(done)
    }
}

/// How many flush records wait in the store at `t` (for `lsfs fsck`,
/// which reads the store without them).
pub fn pending(t: &Target) -> Result<usize, String> {
    let rt = crate::device::runtime()?;
    let list = rt
        .block_on(t.store.list_with_delimiter(Some(&t.path(DIR))))
        .map_err(|e| format!("{}: listing {DIR}/: {e}", t.url))?;
    Ok(list.objects.len())
}

/// Delete record `n` (already gone is no error).
pub fn delete(t: &Target, rt: &Runtime, n: u64) -> Result<(), String> {
    let path = t.path(&name(n));
    match rt.block_on(t.store.delete(&path)) {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(format!("deleting flush record {path}: {e}")),
    }
}
