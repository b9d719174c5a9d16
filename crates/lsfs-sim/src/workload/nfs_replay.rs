//! Replays an NFS trace in Ellard's text format ([`super::nfs_trace`]) as system calls in a
//! directory, as Rohner's nfstrace-replay does for the cleaner experiments.
//!
//! * **Pairing.** A call waits in a table keyed by (client, xid) until its reply arrives; replies
//!   may come in any order and many lines later. An operation is applied when its reply says
//!   `OK`, so the replay follows the server's order of completion and never applies a call the
//!   server refused. Calls without a reply within `reply_timeout_secs` of trace time, replies
//!   without a call, and error replies are counted and skipped.
//! * **Paths.** NFS names objects by file handle. LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, LINK and
//!   RENAME replies bind a handle to (directory handle, name); a handle's path is the chain of
//!   bindings up to a handle nobody named during the trace (the export root, or a file the
//!   client knew before the trace began), which becomes the directory or file `fh-<hash>` in the
//!   target directory. When a LOOKUP later names such a handle, its file or directory is moved
//!   to the named place.
//! * **Effects.** CREATE/MKNOD → create; MKDIR → mkdir; SYMLINK → symlink; WRITE → pwrite of
//!   `count` bytes at `off`; READ → pread; SETATTR with a size → truncate; REMOVE → unlink; RMDIR
//!   → rmdir; RENAME → rename; LINK → link; GETATTR → lstat; READDIR(PLUS) → readdir. The rest
//!   (ACCESS, FSSTAT, COMMIT, …) has no effect to replay and is counted as skipped.
//!
//! Safety: names containing `/`, `.` and `..` are refused, and symlink targets are made
//! relative with no `..` (leading `/` and `..` components are dropped), so nothing the replayer
//! creates or follows leaves the target directory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::{self, BufRead};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::nfs_trace::{parse_line, NfsRecord};
use crate::progress::progress_bar;

#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// A call with no reply after this much trace time is given up.
    pub reply_timeout_secs: f64,
    /// Writes and truncates beyond this size are skipped (traces hold a few huge sparse offsets).
    pub max_file_bytes: u64,
    /// Parse errors quoted in the report (the count is always exact).
    pub max_quoted_errors: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            reply_timeout_secs: 300.0,
            max_file_bytes: 1 << 32,
            max_quoted_errors: 10,
        }
    }
}

/// What happened to the calls of one procedure.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OpCounts {
    pub applied: u64,
    /// Reason → calls.
    pub skipped: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReplayReport {
    pub lines: u64,
    pub calls: u64,
    pub replies: u64,
    /// Calls seen again with the same (client, xid) before their reply.
    pub retransmissions: u64,
    pub parse_errors: u64,
    pub first_parse_errors: Vec<String>,
    pub applied: u64,
    pub skipped: u64,
    pub by_op: BTreeMap<String, OpCounts>,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// Handles bound to a name, and handles materialised as `fh-<hash>` because nobody named them.
    pub handles_named: u64,
    pub handles_anonymous: u64,
    pub elapsed_secs: f64,
}

/// Why a call was not applied.
type Skip = String;

pub struct Replayer {
    root: PathBuf,
    opts: ReplayOptions,
    pending: HashMap<(String, u32), NfsRecord>,
    /// Handle → (directory handle, name).
    parent_of: HashMap<String, (String, String)>,
    /// (directory handle, name) → handle.
    child_of: HashMap<(String, String), String>,
    /// Further names of hard-linked handles, so one can take over when the bound name goes.
    extra_links: HashMap<String, Vec<(String, String)>>,
    /// Unnamed handles that exist on disk as `root/fh-<hash>`.
    anonymous_on_disk: HashSet<String>,
    report: ReplayReport,
    buf: Vec<u8>,
    last_prune_secs: f64,
}

/// Longest chain of directories followed when building a path (real trees are far shallower).
const MAX_DEPTH: usize = 256;

pub fn anonymous_name(fh: &str) -> String {
    // FNV-1a: handles of one server share long prefixes, so a prefix would not do.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in fh.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fh-{h:016x}")
}

fn safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// A symlink target that resolves inside the link's own directory subtree.
pub fn sanitize_symlink_target(target: &str) -> String {
    let parts: Vec<&str> = target
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .collect();
    if parts.is_empty() {
        "_".to_string()
    } else {
        parts.join("/")
    }
}

fn io_skip(e: io::Error) -> Skip {
    format!("io: {:?}", e.kind())
}

fn nfs_error_name(status: u32) -> String {
    let name = match status {
        1 => "PERM",
        2 => "NOENT",
        5 => "IO",
        13 => "ACCES",
        17 => "EXIST",
        18 => "XDEV",
        20 => "NOTDIR",
        21 => "ISDIR",
        22 => "INVAL",
        27 => "FBIG",
        28 => "NOSPC",
        30 => "ROFS",
        31 => "MLINK",
        63 => "NAMETOOLONG",
        66 => "NOTEMPTY",
        69 => "DQUOT",
        70 => "STALE",
        10001 => "BADHANDLE",
        10004 => "NOTSUPP",
        10008 => "JUKEBOX",
        _ => return format!("error reply {status}"),
    };
    format!("error reply {name}")
}

impl Replayer {
    pub fn new(root: &Path, opts: ReplayOptions) -> Self {
        let mut buf = vec![0u8; 1 << 16];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        Self {
            root: root.to_path_buf(),
            opts,
            pending: HashMap::new(),
            parent_of: HashMap::new(),
            child_of: HashMap::new(),
            extra_links: HashMap::new(),
            anonymous_on_disk: HashSet::new(),
            report: ReplayReport::default(),
            buf,
            last_prune_secs: f64::NEG_INFINITY,
        }
    }

    pub fn report(&self) -> &ReplayReport {
        &self.report
    }

    /// Feed one line of the trace (line numbers count from 1).
    pub fn feed_line(&mut self, line: &str, line_number: u64) {
        self.report.lines += 1;
        match parse_line(line) {
            Ok(Some(rec)) => self.feed(rec),
            Ok(None) => {}
            Err(e) => {
                self.report.parse_errors += 1;
                if self.report.first_parse_errors.len() < self.opts.max_quoted_errors {
                    self.report
                        .first_parse_errors
                        .push(format!("line {line_number}: {e}"));
                }
            }
        }
    }

    pub fn feed(&mut self, rec: NfsRecord) {
        let now = rec.time_secs;
        if rec.is_call {
            self.report.calls += 1;
            let key = (rec.client.clone(), rec.xid);
            if self.pending.insert(key, rec).is_some() {
                self.report.retransmissions += 1;
            }
        } else {
            self.report.replies += 1;
            match self.pending.remove(&(rec.client.clone(), rec.xid)) {
                None => self.skip(&rec.procedure, "reply without call".into()),
                Some(call) if call.procedure != rec.procedure => {
                    self.skip(&call.procedure, "reply to another procedure".into())
                }
                Some(call) if rec.status != Some(0) => {
                    self.skip(&call.procedure, nfs_error_name(rec.status.unwrap_or(0)))
                }
                Some(call) => {
                    let op = call.procedure.clone();
                    match self.apply(&call, &rec) {
                        Ok(()) => {
                            self.report.applied += 1;
                            self.report.by_op.entry(op).or_default().applied += 1;
                        }
                        Err(why) => self.skip(&op, why),
                    }
                }
            }
        }
        // Give up calls whose reply is overdue (checked once per second of trace time).
        if now > self.last_prune_secs + 1.0 {
            self.last_prune_secs = now;
            let timeout = self.opts.reply_timeout_secs;
            let overdue: Vec<(String, u32)> = self
                .pending
                .iter()
                .filter(|(_, c)| c.time_secs < now - timeout)
                .map(|(k, _)| k.clone())
                .collect();
            for k in overdue {
                let call = self.pending.remove(&k).expect("listed");
                self.skip(&call.procedure, "no reply".into());
            }
        }
    }

    /// End of trace: calls still waiting never got a reply.
    pub fn finish(mut self) -> ReplayReport {
        let left: Vec<String> = self.pending.drain().map(|(_, c)| c.procedure).collect();
        for op in left {
            self.skip(&op, "no reply".into());
        }
        self.report.handles_named = self.parent_of.len() as u64;
        self.report.handles_anonymous = self.anonymous_on_disk.len() as u64;
        self.report
    }

    fn skip(&mut self, op: &str, why: Skip) {
        self.report.skipped += 1;
        *self
            .report
            .by_op
            .entry(op.to_string())
            .or_default()
            .skipped
            .entry(why)
            .or_default() += 1;
    }

    // ---- the handle → name tree ----

    /// The path of a handle and the unnamed handle its chain ends at.
    fn path_of(&self, fh: &str) -> Result<(PathBuf, String), Skip> {
        let mut names = Vec::new();
        let mut cur = fh;
        while let Some((parent, name)) = self.parent_of.get(cur) {
            names.push(name.as_str());
            cur = parent;
            if names.len() > MAX_DEPTH {
                return Err("path deeper than 256 (handle loop?)".into());
            }
        }
        let mut p = self.root.join(anonymous_name(cur));
        for n in names.iter().rev() {
            p.push(n);
        }
        Ok((p, cur.to_string()))
    }

    /// The path of `name` in directory `dir`, with the directory made to exist.
    fn child_path(&mut self, dir: &str, name: &str) -> Result<PathBuf, Skip> {
        if !safe_name(name) {
            return Err("unsafe name".into());
        }
        let (p, anchor) = self.path_of(dir)?;
        self.make_dir(&p, anchor)?;
        Ok(p.join(name))
    }

    fn make_dir(&mut self, p: &Path, anchor: String) -> Result<(), Skip> {
        fs::create_dir_all(p).map_err(io_skip)?;
        self.anonymous_on_disk.insert(anchor);
        Ok(())
    }

    /// The path of a file handle, with its directory made to exist.
    fn file_path(&mut self, fh: &str) -> Result<PathBuf, Skip> {
        let (p, anchor) = self.path_of(fh)?;
        if let Some(parent) = p.parent() {
            if parent != self.root {
                self.make_dir(parent, anchor.clone())?;
            }
        }
        self.anonymous_on_disk.insert(anchor);
        Ok(p)
    }

    /// Bind `child` to `name` in `dir`, moving what is on disk under its old path.
    fn bind(&mut self, child: &str, dir: &str, name: &str) {
        if !safe_name(name) || child == dir {
            return;
        }
        // Refuse a binding that would make the handle its own ancestor.
        let mut cur = dir;
        for _ in 0..=MAX_DEPTH {
            match self.parent_of.get(cur) {
                Some((p, _)) if p == child => return,
                Some((p, _)) => cur = p,
                None => break,
            }
        }
        if cur == child {
            return;
        }
        let new_key = (dir.to_string(), name.to_string());
        if self.parent_of.get(child) == Some(&new_key) {
            return;
        }
        let old_path = self.path_of(child).ok();
        let old_key = self.parent_of.get(child).cloned();
        if let Some(previous) = self.child_of.insert(new_key.clone(), child.to_string()) {
            if previous != child && self.parent_of.get(&previous) == Some(&new_key) {
                self.parent_of.remove(&previous);
            }
        }
        let was_anonymous = old_key.is_none();
        self.parent_of.insert(child.to_string(), new_key);
        // What was on disk under the old name moves with the handle (a rename the trace did
        // not show, or the naming of an anonymous handle). If both names exist it is a hard
        // link: the old name stays as a further name of the handle.
        let mut moved = false;
        if let (Some((old, _)), Ok((new, anchor))) = (old_path, self.path_of(child)) {
            let on_disk = !was_anonymous || self.anonymous_on_disk.contains(child);
            if on_disk
                && old != new
                && fs::symlink_metadata(&old).is_ok()
                && fs::symlink_metadata(&new).is_err()
            {
                if let Some(parent) = new.parent() {
                    moved = self.make_dir(parent, anchor).is_ok() && fs::rename(&old, &new).is_ok();
                }
            }
            if was_anonymous {
                self.anonymous_on_disk.remove(child);
            }
        }
        if let Some(k) = old_key {
            if self.child_of.get(&k).map(String::as_str) == Some(child) {
                if moved {
                    self.child_of.remove(&k);
                } else {
                    self.extra_links
                        .entry(child.to_string())
                        .or_default()
                        .push(k);
                }
            }
        }
    }

    fn unbind(&mut self, dir: &str, name: &str) {
        let key = (dir.to_string(), name.to_string());
        let Some(child) = self.child_of.remove(&key) else {
            return;
        };
        if self.parent_of.get(&child) != Some(&key) {
            return;
        }
        self.parent_of.remove(&child);
        // A hard link that still names the handle becomes its path.
        let Some(links) = self.extra_links.get_mut(&child) else {
            return;
        };
        while let Some(link) = links.pop() {
            if self.child_of.get(&link) == Some(&child) {
                self.parent_of.insert(child.clone(), link);
                break;
            }
        }
        if links.is_empty() {
            self.extra_links.remove(&child);
        }
    }

    // ---- the operations ----

    fn apply(&mut self, call: &NfsRecord, reply: &NfsRecord) -> Result<(), Skip> {
        let fh = || call.field("fh").ok_or_else(|| Skip::from("no file handle"));
        let name = || {
            call.any_field(&["name", "fn"])
                .ok_or_else(|| Skip::from("no name"))
        };
        match call.procedure.as_str() {
            "lookup" => {
                let child = reply.field("fh").ok_or("reply has no handle")?;
                let (dir, name) = (fh()?.to_string(), name()?.to_string());
                self.bind(child, &dir, &name);
                Ok(())
            }
            "create" | "mknod" | "mkdir" | "symlink" => {
                let (dir, name) = (fh()?.to_string(), name()?.to_string());
                let path = self.child_path(&dir, &name)?;
                match call.procedure.as_str() {
                    "mkdir" => fs::create_dir_all(&path).map_err(io_skip)?,
                    "symlink" => {
                        let target = call
                            .any_field(&["sdata", "name2", "fn2"])
                            .ok_or("no symlink target")?;
                        std::os::unix::fs::symlink(sanitize_symlink_target(target), &path)
                            .map_err(io_skip)?;
                    }
                    _ => {
                        let f = OpenOptions::new()
                            .write(true)
                            .create(true)
                            .truncate(false)
                            .open(&path)
                            .map_err(io_skip)?;
                        if let Some(size) = call.hex("size") {
                            if size > self.opts.max_file_bytes {
                                return Err("size beyond --max-file-bytes".into());
                            }
                            f.set_len(size).map_err(io_skip)?;
                        }
                    }
                }
                // Without a handle in the reply, the next LOOKUP will name the object.
                self.unbind(&dir, &name);
                if let Some(child) = reply.field("fh") {
                    self.bind(child, &dir, &name);
                }
                Ok(())
            }
            "write" => {
                let off = call.any_hex(&["off", "offset"]).ok_or("no offset")?;
                let count = call.any_hex(&["count", "tcount"]).ok_or("no count")?;
                if off.saturating_add(count) > self.opts.max_file_bytes {
                    return Err("write beyond --max-file-bytes".into());
                }
                let path = self.file_path(fh()?)?;
                let f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(io_skip)?;
                let mut done = 0u64;
                while done < count {
                    let n = (count - done).min(self.buf.len() as u64) as usize;
                    // Fresh bytes per write: stamp the xid into the first word.
                    self.buf[..4].copy_from_slice(&call.xid.to_le_bytes());
                    f.write_all_at(&self.buf[..n], off + done)
                        .map_err(io_skip)?;
                    done += n as u64;
                }
                self.report.bytes_written += count;
                Ok(())
            }
            "read" => {
                let off = call.any_hex(&["off", "offset"]).ok_or("no offset")?;
                let count = call.any_hex(&["count", "tcount"]).ok_or("no count")?;
                let (path, _) = self.path_of(fh()?)?;
                let f = fs::File::open(&path).map_err(io_skip)?;
                let mut done = 0u64;
                while done < count {
                    let n = (count - done).min(self.buf.len() as u64) as usize;
                    let got = f.read_at(&mut self.buf[..n], off + done).map_err(io_skip)?;
                    if got == 0 {
                        break;
                    }
                    done += got as u64;
                }
                self.report.bytes_read += done;
                Ok(())
            }
            "setattr" => {
                let size = call.hex("size").ok_or("attributes only (not replayed)")?;
                if size > self.opts.max_file_bytes {
                    return Err("size beyond --max-file-bytes".into());
                }
                let path = self.file_path(fh()?)?;
                let f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(io_skip)?;
                f.set_len(size).map_err(io_skip)
            }
            "remove" | "rmdir" => {
                let (dir, name) = (fh()?.to_string(), name()?.to_string());
                if !safe_name(&name) {
                    return Err("unsafe name".into());
                }
                let (dir_path, _) = self.path_of(&dir)?;
                let path = dir_path.join(&name);
                self.unbind(&dir, &name);
                if call.procedure == "remove" {
                    fs::remove_file(&path).map_err(io_skip)
                } else {
                    match fs::remove_dir(&path) {
                        // The server found it empty; what is left here came from calls whose
                        // removal the trace did not show.
                        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                            fs::remove_dir_all(&path).map_err(io_skip)
                        }
                        r => r.map_err(io_skip),
                    }
                }
            }
            "rename" => {
                let (from_dir, from_name) = (fh()?.to_string(), name()?.to_string());
                let to_dir = call.field("fh2").ok_or("no target directory")?.to_string();
                let to_name = call
                    .any_field(&["name2", "fn2"])
                    .ok_or("no target name")?
                    .to_string();
                if !safe_name(&from_name) {
                    return Err("unsafe name".into());
                }
                let (from_dir_path, _) = self.path_of(&from_dir)?;
                let from = from_dir_path.join(&from_name);
                let to = self.child_path(&to_dir, &to_name)?;
                let moved = self.child_of.remove(&(from_dir.clone(), from_name.clone()));
                self.unbind(&to_dir, &to_name);
                let result = fs::rename(&from, &to).map_err(io_skip);
                if let Some(child) = moved {
                    // The disk already moved (or had nothing); rebind without moving again.
                    let (from_key, to_key) = ((from_dir, from_name), (to_dir, to_name));
                    self.child_of.insert(to_key.clone(), child.clone());
                    if self.parent_of.get(&child) == Some(&from_key) {
                        self.parent_of.insert(child, to_key);
                    } else if let Some(links) = self.extra_links.get_mut(&child) {
                        links
                            .iter_mut()
                            .filter(|l| **l == from_key)
                            .for_each(|l| *l = to_key.clone());
                    }
                }
                result
            }
            "link" => {
                let file = fh()?.to_string();
                let dir = call.field("fh2").ok_or("no target directory")?.to_string();
                let name = name()?.to_string();
                let (src, _) = self.path_of(&file)?;
                let dst = self.child_path(&dir, &name)?;
                self.unbind(&dir, &name);
                self.child_of
                    .insert((dir.clone(), name.clone()), file.clone());
                match self.parent_of.entry(file) {
                    std::collections::hash_map::Entry::Occupied(e) => {
                        let file = e.key().clone();
                        self.extra_links.entry(file).or_default().push((dir, name));
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert((dir, name));
                    }
                }
                fs::hard_link(&src, &dst).map_err(io_skip)
            }
            "getattr" => {
                let (path, _) = self.path_of(fh()?)?;
                fs::symlink_metadata(&path).map(|_| ()).map_err(io_skip)
            }
            "readdir" | "readdirp" | "readdirplus" => {
                let (path, _) = self.path_of(fh()?)?;
                fs::read_dir(&path).map_err(io_skip)?.for_each(drop);
                Ok(())
            }
            _ => Err("no effect to replay".into()),
        }
    }
}

/// Replay a trace file (`-` reads standard input; pipe `.gz` traces through `zcat`).
pub fn replay_file(
    trace: &Path,
    root: &Path,
    opts: ReplayOptions,
    show_progress: bool,
) -> io::Result<ReplayReport> {
    let started = std::time::Instant::now();
    fs::create_dir_all(root)?;
    let (reader, total): (Box<dyn BufRead>, u64) = if trace == Path::new("-") {
        (Box::new(io::BufReader::new(io::stdin())), 0)
    } else {
        let f = fs::File::open(trace)?;
        let len = f.metadata()?.len();
        (Box::new(io::BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = progress_bar(total, "nfs-replay", show_progress);
    let mut r = Replayer::new(root, opts);
    let mut line = String::new();
    let mut reader = reader;
    let mut n = 0u64;
    loop {
        line.clear();
        let got = reader.read_line(&mut line)?;
        if got == 0 {
            break;
        }
        n += 1;
        r.feed_line(&line, n);
        bar.inc(got as u64);
        if n % 65_536 == 0 {
            bar.set_message(format!("{} applied", r.report().applied));
        }
    }
    bar.finish_and_clear();
    let mut report = r.finish();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(report)
}
