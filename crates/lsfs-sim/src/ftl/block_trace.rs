//! Writes a block device completed, read from a text trace of its requests, as the logical
//! pages an FTL under it would be asked to program: `lsfs sim ftl --trace FILE
//! --trace-format blkparse|ftrace`.
//!
//! Two sources of the same kernel event (a request's completion) are read:
//! - `blkparse`'s default output of a `blktrace` capture: `7,0 1 5 0.000123 0 C WS 2048 + 8 [0]`
//!   (device, CPU, sequence, time, pid, action, RWBS, sector `+` sectors, …); only action `C`
//!   lines count, so a request is counted once whatever else was traced about it;
//! - the kernel's `block:block_rq_complete` trace event as tracefs prints it (`trace_pipe`),
//!   where debugfs, and so blktrace, is locked down:
//!   `kworker/0:1-33 [000] ..s.. 752.29: block_rq_complete: 7,0 WS () 80 + 8 be,0,4 [0]`.
//!
//! A request is a write when its RWBS holds `W` (discards are `D`, flushes `F`/`FF` without
//! data, reads `R`). Sectors are 512 bytes; a request is rounded out to the whole pages it
//! touches, as a device with `page_bytes` pages would have to program them.

use std::io::BufRead;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTraceFormat {
    Blkparse,
    Ftrace,
}

/// One completed write request: first 512-byte sector and sector count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockWrite {
    pub sector: u64,
    pub sectors: u64,
}

fn is_write(rwbs: &str) -> bool {
    rwbs.contains('W')
}

/// `RWBS SECTOR + COUNT …` from `words[0]`: whether it writes, first sector, sectors.
fn request(words: &[&str]) -> Option<(bool, u64, u64)> {
    let rwbs = words.first()?;
    let rest = words.get(1..)?;
    if rest.get(1) != Some(&"+") {
        return None;
    }
    let sector = rest.first()?.parse().ok()?;
    let sectors = rest.get(2)?.parse().ok()?;
    Some((is_write(rwbs), sector, sectors))
}

/// The write a line reports, if it is one. `Ok(None)` for lines of other events, reads,
/// flushes and blkparse's summaries; `Err` only for a completion line that does not parse.
pub fn parse_line(line: &str, format: BlockTraceFormat) -> Result<Option<BlockWrite>, String> {
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
    let (write, sector, sectors) = parsed;
    Ok((write && sectors > 0).then_some(BlockWrite { sector, sectors }))
}

/// Every completed write of a trace, in trace order.
pub fn read_writes(
    input: impl BufRead,
    format: BlockTraceFormat,
) -> Result<Vec<BlockWrite>, String> {
    let mut out = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
        if let Some(w) = parse_line(&line, format).map_err(|e| format!("line {}: {e}", n + 1))? {
            out.push(w);
        }
    }
    Ok(out)
}

/// The pages of `page_bytes` each write touches, in order (a partial page counts whole).
pub fn pages(writes: &[BlockWrite], page_bytes: u32) -> Vec<u64> {
    let per_page = (page_bytes as u64 / 512).max(1);
    let mut out = Vec::new();
    for w in writes {
        let first = w.sector / per_page;
        let end = (w.sector + w.sectors).div_ceil(per_page);
        out.extend(first..end);
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

    fn expected() -> Vec<BlockWrite> {
        vec![
            BlockWrite {
                sector: 80,
                sectors: 8,
            },
            BlockWrite {
                sector: 1027,
                sectors: 2,
            },
            BlockWrite {
                sector: 16,
                sectors: 16,
            },
        ]
    }

    #[test]
    fn blkparse_completed_writes_count_once_and_nothing_else_counts() {
        let w = read_writes(BLKPARSE.as_bytes(), BlockTraceFormat::Blkparse).unwrap();
        assert_eq!(w, expected());
    }

    #[test]
    fn ftrace_block_rq_complete_events_give_the_same_writes() {
        let w = read_writes(FTRACE.as_bytes(), BlockTraceFormat::Ftrace).unwrap();
        assert_eq!(w, expected());
    }

    #[test]
    fn writes_round_out_to_whole_pages() {
        // Sectors 80..88 are page 10; 1027..1029 lie inside page 128; 16..32 are pages 2 and 3.
        assert_eq!(pages(&expected(), 4096), vec![10, 128, 2, 3]);
        // A write straddling a page boundary touches both pages.
        let straddle = [BlockWrite {
            sector: 7,
            sectors: 2,
        }];
        assert_eq!(pages(&straddle, 4096), vec![0, 1]);
    }

    #[test]
    fn a_malformed_completion_is_an_error_naming_its_line() {
        let bad = "  7,0 0 1 0.1 0 C WS 80 + x [0]\n";
        let e = read_writes(bad.as_bytes(), BlockTraceFormat::Blkparse).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let bad = "x-1 [000] ..... 1.0: block_rq_complete: 7,0 WS () 80 8\n";
        let e = read_writes(bad.as_bytes(), BlockTraceFormat::Ftrace).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }
}
