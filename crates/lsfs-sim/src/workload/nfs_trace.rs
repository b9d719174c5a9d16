//! NFS trace lines in Ellard's text format: the output of `nfsdump` as published with the
//! Harvard traces (EECS03, DEAS03, CAMPUS, lair62). One line per RPC call or reply:
//!
//! ```text
//! 1034135469.993260 30.0801 31.03ff U C3 5a3c0f9c 3 lookup fh 61890000…  name "foo" con = 130 len = 153
//! 1034135469.993800 31.03ff 30.0801 U R3 5a3c0f9c 3 lookup OK fh 6189000…  ftype 1 mode 1a4 … status=0 pl = 0 con = 274 len = 274
//! ```
//!
//! Fields in order: time (seconds.microseconds, decimal), source and destination host.port
//! (hex, anonymised), transport (`U` or `T`), `C` or `R` followed by the NFS version, the RPC
//! transaction id (xid, hex), the procedure number (hex) and name, then for a reply its status
//! (`OK` or an NFS error number in hex). The rest is `name value` pairs whose presence varies
//! with the procedure and the server, so they are looked up by name, never by position. Numbers
//! are hex; strings (`name`, `name2`, `fn`, `sdata`) are double-quoted. A call ends with
//! `con = N len = N`, a reply with `status=N pl = N con = N len = N`; both are ignored.
//!
//! Where a procedure has several attribute blocks (an object's and its directory's), field names
//! repeat; the first occurrence is kept, which is the object's.

use std::collections::HashMap;

/// One call or reply.
#[derive(Clone, Debug, PartialEq)]
pub struct NfsRecord {
    pub time_secs: f64,
    /// The client's host.port: the source of a call, the destination of a reply. Together with
    /// the xid it pairs a reply with its call (xids are only unique per client).
    pub client: String,
    pub is_call: bool,
    pub version: u8,
    pub xid: u32,
    pub procedure: String,
    /// Replies only: 0 for `OK`, otherwise the NFS error number.
    pub status: Option<u32>,
    pub fields: HashMap<String, String>,
}

/// Errors name the problem; the caller adds the line number.
pub fn parse_line(line: &str) -> Result<Option<NfsRecord>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut t = Tokens { rest: line };
    let time = t.word().ok_or("no time")?;
    let time_secs: f64 = time.parse().map_err(|_| format!("bad time {time:?}"))?;
    let src = t.word().ok_or("no source")?;
    let dst = t.word().ok_or("no destination")?;
    let _transport = t.word().ok_or("no transport")?;
    let dir = t.word().ok_or("no C/R field")?;
    let (is_call, version) = match dir.as_bytes() {
        [b'C', v @ b'1'..=b'4'] => (true, v - b'0'),
        [b'R', v @ b'1'..=b'4'] => (false, v - b'0'),
        _ => return Err(format!("bad call/reply field {dir:?}")),
    };
    let xid_text = t.word().ok_or("no xid")?;
    let xid = u32::from_str_radix(xid_text, 16).map_err(|_| format!("bad xid {xid_text:?}"))?;
    let _procedure_number = t.word().ok_or("no procedure number")?;
    let procedure = t.word().ok_or("no procedure name")?.to_ascii_lowercase();
    let status = if is_call {
        None
    } else {
        let s = t.word().ok_or("no reply status")?;
        Some(if s == "OK" {
            0
        } else {
            u32::from_str_radix(s, 16).map_err(|_| format!("bad reply status {s:?}"))?
        })
    };
    let mut fields = HashMap::new();
    while let Some(key) = t.word() {
        // The trailer: `con = N len = N` or `status=N pl = N …`, or a SHORT PACKET marker.
        if key == "con" || key.starts_with("status=") || key.starts_with("SHORT") {
            break;
        }
        let Some(value) = t.value() else { break };
        fields.entry(key.to_string()).or_insert(value);
    }
    let client = if is_call { src } else { dst };
    Ok(Some(NfsRecord {
        time_secs,
        client: client.to_string(),
        is_call,
        version,
        xid,
        procedure,
        status,
        fields,
    }))
}

struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn word(&mut self) -> Option<&'a str> {
        let s = self.rest.trim_start();
        if s.is_empty() {
            return None;
        }
        let end = s.find(char::is_whitespace).unwrap_or(s.len());
        self.rest = &s[end..];
        Some(&s[..end])
    }

    /// A value: a double-quoted string (no escapes in nfsdump's output) or one word.
    fn value(&mut self) -> Option<String> {
        let s = self.rest.trim_start();
        if let Some(quoted) = s.strip_prefix('"') {
            let end = quoted.find('"')?;
            self.rest = &quoted[end + 1..];
            return Some(quoted[..end].to_string());
        }
        self.word().map(str::to_string)
    }
}

impl NfsRecord {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// A hex number field.
    pub fn hex(&self, name: &str) -> Option<u64> {
        u64::from_str_radix(self.field(name)?, 16).ok()
    }

    /// The first of several alternative names (NFSv2 and v3 name some fields differently).
    pub fn any_field(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| self.field(n))
    }

    pub fn any_hex(&self, names: &[&str]) -> Option<u64> {
        names.iter().find_map(|n| self.hex(n))
    }
}

/// Format a call line (used by the synthetic generator and the tests).
pub fn format_call(
    time_secs: f64,
    client: &str,
    server: &str,
    xid: u32,
    procedure: &str,
    fields: &str,
) -> String {
    let (number, version) = procedure_number(procedure);
    format!(
        "{time_secs:.6} {client} {server} U C{version} {xid:x} {number:x} {procedure} {fields} con = XXX len = XXX"
    )
}

/// Format a reply line; `status` 0 prints `OK`.
pub fn format_reply(
    time_secs: f64,
    client: &str,
    server: &str,
    xid: u32,
    procedure: &str,
    status: u32,
    fields: &str,
) -> String {
    let (number, version) = procedure_number(procedure);
    let status_text = if status == 0 {
        "OK".to_string()
    } else {
        format!("{status:x}")
    };
    format!(
        "{time_secs:.6} {server} {client} U R{version} {xid:x} {number:x} {procedure} {status_text} {fields} status=XXX pl = XXX con = XXX len = XXX"
    )
}

/// NFSv3 procedure numbers (RFC 1813).
fn procedure_number(procedure: &str) -> (u32, u8) {
    let n = match procedure {
        "null" => 0,
        "getattr" => 1,
        "setattr" => 2,
        "lookup" => 3,
        "access" => 4,
        "readlink" => 5,
        "read" => 6,
        "write" => 7,
        "create" => 8,
        "mkdir" => 9,
        "symlink" => 10,
        "mknod" => 11,
        "remove" => 12,
        "rmdir" => 13,
        "rename" => 14,
        "link" => 15,
        "readdir" => 16,
        "readdirp" => 17,
        "fsstat" => 18,
        "fsinfo" => 19,
        "pathconf" => 20,
        "commit" => 21,
        _ => 0,
    };
    (n, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_call_and_its_reply() {
        let c = parse_line(
            r#"1034135469.993260 30.0801 31.03ff U C3 5a3c0f9c 3 lookup fh 6189000000000000 name "my file" euid 1 egid 2 con = 130 len = 153"#,
        )
        .unwrap()
        .unwrap();
        assert!(c.is_call);
        assert_eq!((c.version, c.xid), (3, 0x5a3c_0f9c));
        assert_eq!(c.procedure, "lookup");
        assert_eq!(c.client, "30.0801");
        assert_eq!(c.field("name"), Some("my file"));
        assert_eq!(c.hex("euid"), Some(1));
        assert_eq!(c.status, None);
        let r = parse_line(
            "1034135469.993800 31.03ff 30.0801 U R3 5a3c0f9c 3 lookup OK fh 7a01 ftype 1 mode 1a4 size 2000 ftype 2 mode 1ed status=0 pl = 0 con = 274 len = 274",
        )
        .unwrap()
        .unwrap();
        assert!(!r.is_call);
        assert_eq!(r.client, "30.0801");
        assert_eq!(r.status, Some(0));
        // The first attribute block (the object's) wins over the directory's.
        assert_eq!(r.hex("ftype"), Some(1));
        assert_eq!(r.hex("size"), Some(0x2000));
        let e =
            parse_line("5.0 31.03ff 30.0801 U R3 1f 3 lookup 2 status=2 pl = 0 con = 70 len = 70")
                .unwrap()
                .unwrap();
        assert_eq!(e.status, Some(2));
    }

    #[test]
    fn rejects_malformed_lines_and_skips_blank_ones() {
        assert_eq!(parse_line("   ").unwrap(), None);
        assert_eq!(parse_line("# comment").unwrap(), None);
        assert!(parse_line("x 1 2 U C3 1 3 lookup").is_err());
        assert!(parse_line("1.0 1 2 U Q3 1 3 lookup").is_err());
        assert!(parse_line("1.0 1 2 U C3 zz 3 lookup").is_err());
        assert!(parse_line("1.0 1 2 U R3 1 3 lookup").is_err());
    }

    #[test]
    fn formatted_lines_parse_back() {
        let c = format_call(
            2.5,
            "30.0801",
            "31.0801",
            77,
            "write",
            "fh ab off 2000 count 1000 stable U",
        );
        let r = format_reply(
            2.6,
            "30.0801",
            "31.0801",
            77,
            "write",
            0,
            "ftype 1 size 3000 count 1000",
        );
        let c = parse_line(&c).unwrap().unwrap();
        let r = parse_line(&r).unwrap().unwrap();
        assert_eq!((c.xid, r.xid), (77, 77));
        assert_eq!(c.client, r.client);
        assert_eq!(c.hex("off"), Some(0x2000));
        assert_eq!(r.hex("count"), Some(0x1000));
    }
}
