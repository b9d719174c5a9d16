//! Writes and discards a block device completed, read from a text trace of its requests, as
//! the logical pages an FTL under it would be asked to program or drop: `lsfs sim ftl --trace
//! FILE --trace-format blkparse|ftrace`.
//!
//! Two sources of the same kernel event (a request's completion) are read:
//! - `blkparse`'s default output of a `blktrace` capture: `7,0 1 5 0.000123 0 C WS 2048 + 8 [0]`
//!   (device, CPU, sequence, time, pid, action, RWBS, sector `+` sectors, …); only action `C`
//!   lines count, so a request is counted once whatever else was traced about it;
//! - the kernel's `block:block_rq_complete` trace event as tracefs prints it (`trace_pipe`),
//!   where debugfs, and so blktrace, is locked down:
//!   `kworker/0:1-33 [000] ..s.. 752.29: block_rq_complete: 7,0 WS () 80 + 8 be,0,4 [0]`.
//!
//! A request is a write when its RWBS holds `W`, a discard when it holds `D` (flushes are
//! `F`/`FF` without data, reads `R`). Sectors are 512 bytes; a write is rounded out to the
//! whole pages it touches, as a device with `page_bytes` pages would have to program them, and
//! a discard in to the whole pages it covers (a device cannot drop part of a page).

use std::io::BufRead;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTraceFormat {
    Blkparse,
    Ftrace,
}

/// What a completed request did to its sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp {
    Write,
    Discard,
}

/// One completed write or discard request: first 512-byte sector and sector count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRequest {
    pub op: BlockOp,
    pub sector: u64,
    pub sectors: u64,
}

/// A page-level operation of the host, in trace order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageOp {
    Write(u64),
    Trim(u64),
}

fn op_of(rwbs: &str) -> Option<BlockOp> {
    if rwbs.contains('W') {
        Some(BlockOp::Write)
    } else if rwbs.contains('D') {
        Some(BlockOp::Discard)
    } else {
        None
    }
}

/// `RWBS SECTOR + COUNT …` from `words[0]`: what it does, first sector, sectors.
fn request(words: &[&str]) -> Option<(Option<BlockOp>, u64, u64)> {
    let rwbs = words.first()?;
    let rest = words.get(1..)?;
    if rest.get(1) != Some(&"+") {
        return None;
    }
    let sector = rest.first()?.parse().ok()?;
    let sectors = rest.get(2)?.parse().ok()?;
    Some((op_of(rwbs), sector, sectors))
}

/// The write or discard a line reports, if it is one. `Ok(None)` for lines of other events,
/// reads, flushes and blkparse's summaries; `Err` only for a completion line that does not
/// parse.
pub fn parse_line(line: &str, format: BlockTraceFormat) -> Result<Option<BlockRequest>, String> {
    let parsed = match format {
        BlockTraceFormat::Blkparse => {
            let words: Vec<&str> = line.split_whitespace().collect();
            // dev cpu seq time pid ACTION RWBS …
            if words.len() < 7 || words[5] != "C" || !words[0].contains(',') {
                return Ok(None);
            }
            // A completion without a sector range (a flush) has no "+".
            match request(&words[6..]) {
                Some(r) => r,
                None if words.get(8) != Some(&"+") => return Ok(None),
                None => return Err(format!("bad blkparse completion: {line:?}")),
            }
        }
        BlockTraceFormat::Ftrace => {
            // The task name before the event may hold spaces: find the event by its name.
            let Some((_, rest)) = line.split_once("block_rq_complete: ") else {
                return Ok(None);
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            // dev RWBS (cmd) SECTOR + COUNT …; the command is "()" but for passthrough
            // requests, whose bytes it lists, so the sector is found by the "+" after it.
            let plus = words.iter().position(|w| *w == "+").unwrap_or(0);
            (plus >= 3)
                .then(|| request(&[&[words[1]], &words[plus - 1..]].concat()))
                .flatten()
                .ok_or_else(|| format!("bad block_rq_complete event: {line:?}"))?
        }
    };
    let (op, sector, sectors) = parsed;
    Ok(op.filter(|_| sectors > 0).map(|op| BlockRequest {
        op,
        sector,
        sectors,
    }))
}

/// Every completed write and discard of a trace, in trace order.
pub fn read_requests(
    input: impl BufRead,
    format: BlockTraceFormat,
) -> Result<Vec<BlockRequest>, String> {
    let mut out = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if let Some(w) = parse_line(&line, format).map_err(|e| format!("line {}: {e}", n + 1))? {
            out.push(w);
        }
    }
    Ok(out)
}

/// The page operations of `requests` on pages of `page_bytes`, in order: each page a write
/// touches (a partial page counts whole), each page a discard covers whole.
pub fn page_ops(requests: &[BlockRequest], page_bytes: u32) -> Vec<PageOp> {
    let per_page = (page_bytes as u64 / 512).max(1);
    let mut out = Vec::new();
    for r in requests {
        let end_sector = r.sector + r.sectors;
        match r.op {
            BlockOp::Write => {
                let pages = r.sector / per_page..end_sector.div_ceil(per_page);
                out.extend(pages.map(PageOp::Write));
            }
            BlockOp::Discard => {
                let pages = r.sector.div_ceil(per_page)..end_sector / per_page;
                out.extend(pages.map(PageOp::Trim));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// blkparse's default output of a blktrace capture (`blkparse -i loop0`), abridged.
    const BLKPARSE: &str = "\
  7,0    1        1     0.000000000  4242  Q  WS 80 + 8 [fio]
  7,0    1        2     0.000004100  4242  G  WS 80 + 8 [fio]
  7,0    1        3     0.000012000  4242  D  WS 80 + 8 [fio]
  7,0    0        1     0.000210000     0  C  WS 80 + 8 [0]
  7,0    0        2     0.000300000     0  C  W 1027 + 2 [0]
  7,0    0        3     0.000400000     0  C  RA 4096 + 8 [0]
  7,0    0        4     0.000500000     0  C  D 8192 + 2048 [0]
  7,0    0        5     0.000600000     0  C  FN 0 [0]
  7,0    0        6     0.000700000     0  C  FWFS 16 + 16 [0]
CPU0 (loop0):
 Reads Queued:           0,        0KiB\t Writes Queued:           1,        4KiB
Total (loop0):
";

    /// The same kind of events from tracefs (`events/block/block_rq_complete`, trace_pipe).
    const FTRACE: &str = "\
     ksoftirqd/0-14      [000] ..s..   752.294498: block_rq_complete: 7,0 WS () 80 + 8 be,0,4 [0]
    kworker/u8:1-33      [000] .Ns..   752.298991: block_rq_complete: 7,0 W () 1027 + 2 be,0,4 [0]
     ksoftirqd/1-22      [001] ..s..   752.303933: block_rq_complete: 7,0 FF () 18446744073709551615 + 0 none,0,0 [0]
     ksoftirqd/1-22      [001] dNs1.   752.303946: block_rq_complete: 7,0 WS () 0 + 0 be,0,4 [0]
     ksoftirqd/1-22      [001] ..s..   752.310093: block_rq_complete: 7,0 RA () 4096 + 8 be,0,4 [0]
     my task-77          [001] ..s..   752.310100: block_rq_complete: 7,0 D () 8192 + 2048 be,0,4 [0]
     ksoftirqd/1-22      [001] ..s..   752.310153: block_rq_complete: 7,0 FWFS () 16 + 16 be,0,4 [0]
";

    fn req(op: BlockOp, sector: u64, sectors: u64) -> BlockRequest {
        BlockRequest {
            op,
            sector,
            sectors,
        }
    }

    fn expected() -> Vec<BlockRequest> {
        vec![
            req(BlockOp::Write, 80, 8),
            req(BlockOp::Write, 1027, 2),
            req(BlockOp::Discard, 8192, 2048),
            req(BlockOp::Write, 16, 16),
        ]
    }

    #[test]
    fn blkparse_completed_writes_and_discards_count_once_and_nothing_else_counts() {
        let w = read_requests(BLKPARSE.as_bytes(), BlockTraceFormat::Blkparse).unwrap();
        assert_eq!(w, expected());
    }

    #[test]
    fn ftrace_block_rq_complete_events_give_the_same_requests() {
        let w = read_requests(FTRACE.as_bytes(), BlockTraceFormat::Ftrace).unwrap();
        assert_eq!(w, expected());
    }

    #[test]
    fn writes_round_out_and_discards_round_in_to_whole_pages() {
        use PageOp::{Trim, Write};
        // Sectors 80..88 are page 10; 1027..1029 lie inside page 128; 8192..10240 are pages
        // 1024..1280; 16..32 are pages 2 and 3.
        let ops = page_ops(&expected(), 4096);
        let want: Vec<PageOp> = [Write(10), Write(128)]
            .into_iter()
            .chain((1024..1280).map(Trim))
            .chain([Write(2), Write(3)])
            .collect();
        assert_eq!(ops, want);
        // A write straddling a page boundary touches both pages; a discard of the same
        // sectors covers neither.
        let straddle = [req(BlockOp::Write, 7, 2), req(BlockOp::Discard, 7, 2)];
        assert_eq!(page_ops(&straddle, 4096), vec![Write(0), Write(1)]);
        // A discard from the middle of page 0 to the end of page 2 covers pages 1 and 2.
        let tail = [req(BlockOp::Discard, 4, 20)];
        assert_eq!(page_ops(&tail, 4096), vec![Trim(1), Trim(2)]);
    }

    #[test]
    fn a_malformed_completion_is_an_error_naming_its_line() {
        let bad = "  7,0 0 1 0.1 0 C WS 80 + x [0]\n";
        let e = read_requests(bad.as_bytes(), BlockTraceFormat::Blkparse).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let bad = "x-1 [000] ..... 1.0: block_rq_complete: 7,0 WS () 80 8\n";
        let e = read_requests(bad.as_bytes(), BlockTraceFormat::Ftrace).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }
}
