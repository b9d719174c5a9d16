//! Page-level I/O traces: one request per line, `R <page> [pages]` or `W <page> [pages]`
//! (a multi-page request expands to consecutive pages). `#` starts a comment line.

use std::io::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub page: u64,
    pub write: bool,
}

pub fn parse_trace(text: &str) -> Result<Vec<Request>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let write = match words.next() {
            Some("W" | "w") => true,
            Some("R" | "r") => false,
            other => return Err(format!("line {}: expected R or W, got {other:?}", n + 1)),
        };
        let number = |w: Option<&str>, default: Option<u64>| -> Result<u64, String> {
            match (w, default) {
                (Some(w), _) => w.parse().map_err(|e| format!("line {}: {w:?}: {e}", n + 1)),
                (None, Some(d)) => Ok(d),
                (None, None) => Err(format!("line {}: missing page number", n + 1)),
            }
        };
        let page = number(words.next(), None)?;
        let pages = number(words.next(), Some(1))?;
        out.extend((page..page + pages).map(|page| Request { page, write }));
    }
    Ok(out)
}

/// Write requests in the same format, merging consecutive pages of one kind into one line.
pub fn write_trace(out: &mut impl Write, requests: &[Request]) -> std::io::Result<()> {
    let mut i = 0;
    while i < requests.len() {
        let first = requests[i];
        let mut n = 1;
        while i + n < requests.len()
            && requests[i + n].write == first.write
            && requests[i + n].page == first.page + n as u64
        {
            n += 1;
        }
        let op = if first.write { 'W' } else { 'R' };
        if n == 1 {
            writeln!(out, "{op} {}", first.page)?;
        } else {
            writeln!(out, "{op} {} {n}", first.page)?;
        }
        i += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_round_trip_through_text() {
        let reqs = parse_trace("# x\nW 10 3\nR 4\nw 13\n").unwrap();
        assert_eq!(reqs.len(), 5);
        assert_eq!(
            reqs[2],
            Request {
                page: 12,
                write: true
            }
        );
        let mut text = Vec::new();
        write_trace(&mut text, &reqs).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "W 10 3\nR 4\nW 13\n");
        assert!(parse_trace("X 1").is_err());
    }
}
