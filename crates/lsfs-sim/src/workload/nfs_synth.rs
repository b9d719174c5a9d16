//! A seeded synthetic NFS trace in Ellard's text format, so the replayer can be exercised at
//! scale without the Harvard traces (which are not available here).
//!
//! The generator keeps a model of one server's namespace (files, directories, symlinks, hard
//! links) that starts empty under one export root, and emits calls from several clients with
//! an operation mix in the spirit of Ellard's EECS traces (many LOOKUP/GETATTR, small writes,
//! frequent create and remove of short-lived files): LOOKUP, GETATTR, ACCESS, READ, WRITE
//! (appends until a file reaches a size from yFS's size mixture, then 8 KiB overwrites, 80 % of
//! them to 20 % of the files), CREATE, REMOVE, SETATTR (truncate, or mode only), MKDIR, RMDIR,
//! RENAME, SYMLINK, LINK, READDIR and COMMIT.
//!
//! Replies come up to `reorder_window` calls late and in random order; a fraction of the calls
//! are refused with the error a server would give (NOENT, EXIST, NOTEMPTY, INVAL), a fraction
//! are retransmitted, and with `lost_reply_fraction` > 0 some replies never appear. Two calls in
//! flight never touch the same object, so with no lost replies the namespace the replay builds
//! must equal the model's ([`NfsSynth::expected_tree`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};

use lsfs_policy::SplitMix64;

use super::aging::file_size_bytes;
use super::nfs_replay::anonymous_name;
use super::nfs_trace::{format_call, format_reply};

#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub operations: u64,
    pub clients: u32,
    /// Creates stop at this many files; removes then keep the count near it.
    pub max_files: usize,
    /// Largest size a file grows to (its target comes from yFS's size mixture).
    pub max_file_bytes: u64,
    /// Calls answered with an error instead of doing something.
    pub error_fraction: f64,
    pub lost_reply_fraction: f64,
    pub retransmit_fraction: f64,
    /// Replies wait for up to this many later calls.
    pub reorder_window: usize,
    pub seed: u64,
}

impl Default for SynthOptions {
    fn default() -> Self {
        Self {
            operations: 100_000,
            clients: 8,
            max_files: 5_000,
            max_file_bytes: 1 << 20,
            error_fraction: 0.03,
            lost_reply_fraction: 0.0,
            retransmit_fraction: 0.005,
            reorder_window: 8,
            seed: 1,
        }
    }
}

#[derive(Debug, Default, serde::Serialize)]
pub struct SynthReport {
    pub lines: u64,
    pub calls: u64,
    pub replies: u64,
    pub error_replies: u64,
    pub lost_replies: u64,
    pub calls_by_op: BTreeMap<String, u64>,
    pub files_at_end: usize,
    pub bytes_written: u64,
}

/// What a path holds at the end: a directory, a file of some size, or a symlink's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir,
    File(u64),
    Symlink(String),
}

#[derive(Clone, Debug)]
enum Kind {
    File { size: u64, target: u64 },
    Dir { children: BTreeMap<String, u64> },
    Symlink { target: String },
}

#[derive(Clone, Debug)]
struct Obj {
    kind: Kind,
    /// Every (directory, name) naming it; a directory has exactly one.
    names: Vec<(u64, String)>,
}

struct Pending {
    line: String,
    touched: Vec<u64>,
}

pub struct NfsSynth {
    opts: SynthOptions,
    rng: SplitMix64,
    objs: HashMap<u64, Obj>,
    files: Vec<u64>,
    dirs: Vec<u64>,
    next_id: u64,
    time_secs: f64,
    xids: Vec<u32>,
    in_flight: Vec<Pending>,
    busy: HashSet<u64>,
    report: SynthReport,
}

const ROOT: u64 = 1;
const SERVER: &str = "31.0801";

pub fn handle(id: u64) -> String {
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    format!("1f2e3d4c00000002{id:016x}{x:016x}0000000000000000")
}

impl NfsSynth {
    pub fn new(opts: SynthOptions) -> Self {
        assert!(opts.clients > 0 && opts.max_files > 0);
        let mut rng = SplitMix64::new(opts.seed);
        let xids = (0..opts.clients).map(|_| rng.next_u64() as u32).collect();
        let mut objs = HashMap::new();
        objs.insert(
            ROOT,
            Obj {
                kind: Kind::Dir {
                    children: BTreeMap::new(),
                },
                names: Vec::new(),
            },
        );
        Self {
            opts,
            rng,
            objs,
            files: Vec::new(),
            dirs: vec![ROOT],
            next_id: 2,
            time_secs: 1_034_135_469.0,
            xids,
            in_flight: Vec::new(),
            busy: HashSet::new(),
            report: SynthReport::default(),
        }
    }

    /// The directory the replay of the export root ends up in.
    pub fn root_dir_name() -> String {
        anonymous_name(&handle(ROOT))
    }

    pub fn write_trace(
        mut self,
        out: &mut dyn Write,
    ) -> io::Result<(SynthReport, BTreeMap<String, Entry>)> {
        for _ in 0..self.opts.operations {
            self.step(out)?;
        }
        self.flush_all(out)?;
        self.report.files_at_end = self.files.len();
        let tree = self.expected_tree();
        Ok((self.report, tree))
    }

    /// Every path under the root (relative, `/`-separated) and what it holds.
    pub fn expected_tree(&self) -> BTreeMap<String, Entry> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let Kind::Dir { children } = &self.objs[&dir].kind else {
                unreachable!("only directories are stacked")
            };
            for (name, id) in children {
                let path = format!("{prefix}{name}");
                let e = match &self.objs[id].kind {
                    Kind::Dir { .. } => {
                        stack.push((*id, format!("{path}/")));
                        Entry::Dir
                    }
                    Kind::File { size, .. } => Entry::File(*size),
                    Kind::Symlink { target } => Entry::Symlink(target.clone()),
                };
                out.insert(path, e);
            }
        }
        out
    }

    // ---- emission ----

    fn tick(&mut self) -> f64 {
        let u = self.rng.unit_f64().max(1e-12);
        self.time_secs += -u.ln() * 0.002;
        self.time_secs
    }

    /// Emit a call now and queue its reply; `touched` are the objects it reads or changes.
    fn call(
        &mut self,
        out: &mut dyn Write,
        procedure: &str,
        call_fields: String,
        status: u32,
        reply_fields: String,
        touched: Vec<u64>,
    ) -> io::Result<()> {
        if touched.iter().any(|t| self.busy.contains(t)) {
            self.flush_all(out)?;
        }
        let c = self.rng.below(self.opts.clients as u64) as usize;
        self.xids[c] = self.xids[c].wrapping_add(1);
        let xid = self.xids[c];
        let client = format!("{:x}.03ff", 0x30 + c);
        let t = self.tick();
        let line = format_call(t, &client, SERVER, xid, procedure, &call_fields);
        writeln!(out, "{line}")?;
        self.report.lines += 1;
        self.report.calls += 1;
        *self
            .report
            .calls_by_op
            .entry(procedure.to_string())
            .or_default() += 1;
        if self.rng.unit_f64() < self.opts.retransmit_fraction {
            let t = self.tick();
            writeln!(
                out,
                "{}",
                format_call(t, &client, SERVER, xid, procedure, &call_fields)
            )?;
            self.report.lines += 1;
        }
        if status != 0 {
            self.report.error_replies += 1;
        }
        if self.rng.unit_f64() < self.opts.lost_reply_fraction {
            self.report.lost_replies += 1;
            return Ok(());
        }
        // The reply's time is filled in when it is released.
        let reply = format_reply(0.0, &client, SERVER, xid, procedure, status, &reply_fields);
        self.busy.extend(touched.iter().copied());
        self.in_flight.push(Pending {
            line: reply,
            touched,
        });
        while self.in_flight.len() > self.opts.reorder_window
            || (!self.in_flight.is_empty() && self.rng.below(3) == 0)
        {
            let i = self.rng.below(self.in_flight.len() as u64) as usize;
            self.release(out, i)?;
        }
        Ok(())
    }

    fn release(&mut self, out: &mut dyn Write, i: usize) -> io::Result<()> {
        let p = self.in_flight.swap_remove(i);
        for t in &p.touched {
            self.busy.remove(t);
        }
        let t = self.tick();
        // Replace the placeholder time (the first field).
        let rest = p.line.split_once(' ').map_or("", |(_, r)| r);
        writeln!(out, "{t:.6} {rest}")?;
        self.report.lines += 1;
        self.report.replies += 1;
        Ok(())
    }

    fn flush_all(&mut self, out: &mut dyn Write) -> io::Result<()> {
        while !self.in_flight.is_empty() {
            let i = self.rng.below(self.in_flight.len() as u64) as usize;
            self.release(out, i)?;
        }
        Ok(())
    }

    // ---- the model ----

    fn pick(&mut self, v: &[u64]) -> Option<u64> {
        if v.is_empty() {
            None
        } else {
            Some(v[self.rng.below(v.len() as u64) as usize])
        }
    }

    /// A file, 80 % of the picks going to the first 20 % of the file list.
    fn pick_file(&mut self) -> Option<u64> {
        let n = self.files.len() as u64;
        if n == 0 {
            return None;
        }
        let hot = (n / 5).max(1);
        let i = if self.rng.below(10) < 8 {
            self.rng.below(hot)
        } else {
            self.rng.below(n)
        };
        Some(self.files[i as usize])
    }

    fn attrs(&self, id: u64) -> String {
        match &self.objs[&id].kind {
            Kind::File { size, .. } => format!(
                "ftype 1 mode 1a4 nlink {:x} size {size:x} fileid {id:x}",
                self.objs[&id].names.len()
            ),
            Kind::Dir { .. } => format!("ftype 2 mode 1ed nlink 2 size 1000 fileid {id:x}"),
            Kind::Symlink { target } => format!(
                "ftype 5 mode 1ff nlink 1 size {:x} fileid {id:x}",
                target.len()
            ),
        }
    }

    fn children(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match &mut self.objs.get_mut(&dir).expect("dir exists").kind {
            Kind::Dir { children } => children,
            _ => unreachable!("not a directory"),
        }
    }

    fn fresh_name(&mut self, prefix: &str) -> String {
        let id = self.next_id;
        // Mostly plain names; now and then one with a space, as user files have.
        if self.rng.below(50) == 0 {
            format!("{prefix}{id} copy")
        } else {
            format!("{prefix}{id}")
        }
    }

    fn add(&mut self, dir: u64, name: &str, kind: Kind) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        match kind {
            Kind::File { .. } => self.files.push(id),
            Kind::Dir { .. } => self.dirs.push(id),
            Kind::Symlink { .. } => {}
        }
        self.objs.insert(
            id,
            Obj {
                kind,
                names: vec![(dir, name.to_string())],
            },
        );
        self.children(dir).insert(name.to_string(), id);
        id
    }

    /// Drop one name; the object goes when its last name does.
    fn drop_name(&mut self, dir: u64, name: &str) {
        let id = self.children(dir).remove(name).expect("name exists");
        let obj = self.objs.get_mut(&id).expect("object exists");
        obj.names.retain(|(d, n)| !(*d == dir && n == name));
        if obj.names.is_empty() {
            let obj = self.objs.remove(&id).expect("object exists");
            let list = match obj.kind {
                Kind::File { .. } => &mut self.files,
                Kind::Dir { .. } => &mut self.dirs,
                Kind::Symlink { .. } => return,
            };
            let i = list.iter().position(|x| *x == id).expect("listed");
            list.swap_remove(i);
        }
    }

    fn is_ancestor(&self, a: u64, mut d: u64) -> bool {
        while d != ROOT {
            if d == a {
                return true;
            }
            d = self.objs[&d].names[0].0;
        }
        a == ROOT
    }

    fn step(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let roll = self.rng.below(1000);
        let err = self.rng.unit_f64() < self.opts.error_fraction;
        match roll {
            0..=229 => self.lookup(out, err),
            230..=359 => self.simple(out, "getattr"),
            360..=399 => self.simple(out, "access"),
            400..=509 => self.read(out),
            510..=729 => self.write(out),
            730..=799 => self.create(out, err),
            800..=859 => self.remove(out, err),
            860..=889 => self.setattr(out),
            890..=904 => self.mkdir(out),
            905..=919 => self.rmdir(out),
            920..=949 => self.rename(out),
            950..=959 => self.symlink(out),
            960..=969 => self.link(out),
            970..=984 => self.simple(out, "readdir"),
            _ => self.simple(out, "commit"),
        }
    }

    fn lookup(&mut self, out: &mut dyn Write, err: bool) -> io::Result<()> {
        let dirs = self.dirs.clone();
        let dir = self.pick(&dirs).expect("root exists");
        let entries: Vec<(String, u64)> = self
            .children(dir)
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        if err || entries.is_empty() {
            let name = format!("missing{}", self.rng.below(1000));
            return self.call(
                out,
                "lookup",
                format!("fh {} name \"{name}\"", handle(dir)),
                2,
                String::new(),
                vec![dir],
            );
        }
        let (name, id) = entries[self.rng.below(entries.len() as u64) as usize].clone();
        let reply = format!("fh {} {} {}", handle(id), self.attrs(id), self.attrs(dir));
        self.call(
            out,
            "lookup",
            format!("fh {} name \"{name}\"", handle(dir)),
            0,
            reply,
            vec![dir, id],
        )
    }

    fn simple(&mut self, out: &mut dyn Write, op: &str) -> io::Result<()> {
        let id = if op == "readdir" {
            let dirs = self.dirs.clone();
            self.pick(&dirs)
        } else {
            self.pick_file()
        };
        let Some(id) = id else { return Ok(()) };
        let fields = match op {
            "access" => format!("fh {} acc 1f", handle(id)),
            "readdir" => format!("fh {} cookie 0 count 2000", handle(id)),
            "commit" => format!("fh {} off 0 count 0", handle(id)),
            _ => format!("fh {}", handle(id)),
        };
        let reply = self.attrs(id);
        self.call(out, op, fields, 0, reply, vec![id])
    }

    fn read(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let Some(id) = self.pick_file() else {
            return Ok(());
        };
        let Kind::File { size, .. } = self.objs[&id].kind else {
            unreachable!()
        };
        let off = if size > 0 {
            self.rng.below(size) & !0xfff
        } else {
            0
        };
        let count = 8192;
        let got = size.saturating_sub(off).min(count);
        let reply = format!(
            "{} count {got:x} eof {}",
            self.attrs(id),
            u8::from(off + got >= size)
        );
        self.call(
            out,
            "read",
            format!("fh {} off {off:x} count {count:x}", handle(id)),
            0,
            reply,
            vec![id],
        )
    }

    fn write(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let Some(id) = self.pick_file() else {
            return Ok(());
        };
        let Kind::File { size, target } = self.objs[&id].kind else {
            unreachable!()
        };
        let (off, count) = if size < target {
            (size, (target - size).min(32 << 10))
        } else {
            let chunks = (size / 8192).max(1);
            (self.rng.below(chunks) * 8192, 8192)
        };
        let new_size = size.max(off + count);
        if let Kind::File { size, .. } = &mut self.objs.get_mut(&id).expect("exists").kind {
            *size = new_size;
        }
        self.report.bytes_written += count;
        let reply = format!("{} count {count:x} stable U", self.attrs(id));
        self.call(
            out,
            "write",
            format!("fh {} off {off:x} count {count:x} stable U", handle(id)),
            0,
            reply,
            vec![id],
        )
    }

    fn create(&mut self, out: &mut dyn Write, err: bool) -> io::Result<()> {
        let dirs = self.dirs.clone();
        let dir = self.pick(&dirs).expect("root exists");
        let existing: Vec<String> = self.children(dir).keys().cloned().collect();
        if err && !existing.is_empty() {
            // An exclusive create of a name that exists.
            let name = existing[self.rng.below(existing.len() as u64) as usize].clone();
            return self.call(
                out,
                "create",
                format!("fh {} name \"{name}\" how E", handle(dir)),
                17,
                String::new(),
                vec![dir],
            );
        }
        if self.files.len() >= self.opts.max_files {
            return self.remove(out, false);
        }
        let name = self.fresh_name("f");
        let target = file_size_bytes(&mut self.rng).min(self.opts.max_file_bytes);
        let id = self.add(dir, &name, Kind::File { size: 0, target });
        let reply = format!("fh {} {}", handle(id), self.attrs(id));
        self.call(
            out,
            "create",
            format!("fh {} name \"{name}\" how U mode 1a4", handle(dir)),
            0,
            reply,
            vec![dir, id],
        )
    }

    /// A removable name (file or symlink) and its directory.
    fn pick_leaf_name(&mut self) -> Option<(u64, String, u64)> {
        let id = self.pick_file()?;
        let names = self.objs[&id].names.clone();
        let (dir, name) = names[self.rng.below(names.len() as u64) as usize].clone();
        Some((dir, name, id))
    }

    fn remove(&mut self, out: &mut dyn Write, err: bool) -> io::Result<()> {
        let dirs = self.dirs.clone();
        if err || self.files.is_empty() {
            let dir = self.pick(&dirs).expect("root exists");
            let name = format!("gone{}", self.rng.below(1000));
            return self.call(
                out,
                "remove",
                format!("fh {} name \"{name}\"", handle(dir)),
                2,
                String::new(),
                vec![dir],
            );
        }
        let (dir, name, id) = self.pick_leaf_name().expect("a file exists");
        self.drop_name(dir, &name);
        self.call(
            out,
            "remove",
            format!("fh {} name \"{name}\"", handle(dir)),
            0,
            String::new(),
            vec![dir, id],
        )
    }

    fn setattr(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let Some(id) = self.pick_file() else {
            return Ok(());
        };
        if self.rng.below(3) == 0 {
            let reply = self.attrs(id);
            return self.call(
                out,
                "setattr",
                format!("fh {} mode 180", handle(id)),
                0,
                reply,
                vec![id],
            );
        }
        let Kind::File { size, .. } = self.objs[&id].kind else {
            unreachable!()
        };
        let new_size = if size == 0 {
            0
        } else {
            self.rng.below(size + 1)
        };
        if let Kind::File { size, .. } = &mut self.objs.get_mut(&id).expect("exists").kind {
            *size = new_size;
        }
        let reply = self.attrs(id);
        self.call(
            out,
            "setattr",
            format!("fh {} size {new_size:x}", handle(id)),
            0,
            reply,
            vec![id],
        )
    }

    fn mkdir(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let dirs = self.dirs.clone();
        let dir = self.pick(&dirs).expect("root exists");
        if self.dirs.len() > 1 + self.opts.max_files / 16 {
            return Ok(());
        }
        let name = self.fresh_name("d");
        let id = self.add(
            dir,
            &name,
            Kind::Dir {
                children: BTreeMap::new(),
            },
        );
        let reply = format!("fh {} {}", handle(id), self.attrs(id));
        self.call(
            out,
            "mkdir",
            format!("fh {} name \"{name}\" mode 1ed", handle(dir)),
            0,
            reply,
            vec![dir, id],
        )
    }

    fn rmdir(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let dirs: Vec<u64> = self.dirs.iter().copied().filter(|d| *d != ROOT).collect();
        let Some(id) = self.pick(&dirs) else {
            return Ok(());
        };
        let (parent, name) = self.objs[&id].names[0].clone();
        let empty = self.children(id).is_empty();
        let fields = format!("fh {} name \"{name}\"", handle(parent));
        if !empty {
            return self.call(out, "rmdir", fields, 66, String::new(), vec![parent, id]);
        }
        self.drop_name(parent, &name);
        self.call(out, "rmdir", fields, 0, String::new(), vec![parent, id])
    }

    fn rename(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let dirs = self.dirs.clone();
        let to_dir = self.pick(&dirs).expect("root exists");
        // Mostly files; sometimes a directory.
        let (from_dir, name, id) = if self.rng.below(5) == 0 && dirs.len() > 1 {
            let candidates: Vec<u64> = dirs.iter().copied().filter(|d| *d != ROOT).collect();
            let Some(d) = self.pick(&candidates) else {
                return Ok(());
            };
            let (p, n) = self.objs[&d].names[0].clone();
            (p, n, d)
        } else {
            let Some(x) = self.pick_leaf_name() else {
                return Ok(());
            };
            x
        };
        let to_name = self.fresh_name("r");
        self.next_id += 1;
        let fields = format!(
            "fh {} name \"{name}\" fh2 {} name2 \"{to_name}\"",
            handle(from_dir),
            handle(to_dir)
        );
        let touched = vec![from_dir, to_dir, id];
        if matches!(self.objs[&id].kind, Kind::Dir { .. }) && self.is_ancestor(id, to_dir) {
            return self.call(out, "rename", fields, 22, String::new(), touched);
        }
        self.children(from_dir).remove(&name);
        self.children(to_dir).insert(to_name.clone(), id);
        for n in self.objs.get_mut(&id).expect("exists").names.iter_mut() {
            if n.0 == from_dir && n.1 == name {
                *n = (to_dir, to_name.clone());
            }
        }
        self.call(out, "rename", fields, 0, String::new(), touched)
    }

    fn symlink(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let dirs = self.dirs.clone();
        let dir = self.pick(&dirs).expect("root exists");
        let name = self.fresh_name("l");
        let target = format!("../lib/target{}", self.rng.below(100));
        let stored = super::nfs_replay::sanitize_symlink_target(&target);
        let id = self.add(dir, &name, Kind::Symlink { target: stored });
        let reply = format!("fh {} {}", handle(id), self.attrs(id));
        self.call(
            out,
            "symlink",
            format!("fh {} name \"{name}\" sdata \"{target}\"", handle(dir)),
            0,
            reply,
            vec![dir, id],
        )
    }

    fn link(&mut self, out: &mut dyn Write) -> io::Result<()> {
        let Some(id) = self.pick_file() else {
            return Ok(());
        };
        let dirs = self.dirs.clone();
        let dir = self.pick(&dirs).expect("root exists");
        let name = self.fresh_name("h");
        self.next_id += 1;
        self.children(dir).insert(name.clone(), id);
        self.objs
            .get_mut(&id)
            .expect("exists")
            .names
            .push((dir, name.clone()));
        let reply = self.attrs(id);
        self.call(
            out,
            "link",
            format!("fh {} fh2 {} name \"{name}\"", handle(id), handle(dir)),
            0,
            reply,
            vec![id, dir],
        )
    }
}
