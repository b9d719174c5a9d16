//! `lsfs defrag PATH...`: lay fragmented files out again, online, through
//! the mount's control socket (`Lsfs::defrag_file`, one request per file,
//! so other requests go on between files). A directory stands for every
//! regular file under it that is on the same mount; the mount point for
//! the whole file system.

use crate::control;
use clap::Args;
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct DefragArgs {
    /// Files or directories (every file under them, on the same mount).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Rewrite files that are contiguous enough already, too.
    #[arg(long)]
    force: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Totals over the files defragmented.
#[derive(Default)]
struct Totals {
    files: u64,
    moved_files: u64,
    blocks: u64,
    moved: u64,
    runs_before: u64,
    runs_after: u64,
}

pub fn run(a: DefragArgs) -> Result<(), String> {
    let mut t = Totals::default();
    for path in &a.paths {
        let path = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mount = lsfs_mount_of(&path)?;
        let dev = std::fs::metadata(&mount)
            .map_err(|e| format!("{}: {e}", mount.display()))?
            .dev();
        let mut files = Vec::new();
        collect_files(&path, dev, &mut files)?;
        let visible = !a.json && std::io::stderr().is_terminal();
        let bar = lsfs_sim::progress::progress_bar(files.len() as u64, "defrag", visible);
        for (f, ino) in files {
            bar.set_message(f.display().to_string());
            let req = json!({ "cmd": "defrag", "ino": ino, "force": a.force });
            let v = control::request(&mount, &req).map_err(|e| format!("{}: {e}", f.display()))?;
            add(&mut t, &v["defrag"]);
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    if a.json {
        println!(
            "{}",
            json!({ "files": t.files, "files_moved": t.moved_files, "blocks": t.blocks,
                    "blocks_moved": t.moved, "runs_before": t.runs_before, "runs_after": t.runs_after })
        );
    } else {
        println!(
            "{} files, {} laid out again: {} of {} blocks moved; physical runs {} -> {}",
            t.files, t.moved_files, t.moved, t.blocks, t.runs_before, t.runs_after
        );
    }
    Ok(())
}

fn add(t: &mut Totals, d: &Value) {
    let n = |k: &str| d[k].as_u64().unwrap_or(0);
    t.files += 1;
    t.moved_files += u64::from(n("moved") > 0);
    t.blocks += n("blocks");
    t.moved += n("moved");
    t.runs_before += n("runs_before");
    t.runs_after += n("runs_after");
}

/// The regular files at or under `path` on device `dev`, with their inode
/// numbers (lsfs's own, which the mount reports as st_ino).
fn collect_files(path: &Path, dev: u64, out: &mut Vec<(PathBuf, u64)>) -> Result<(), String> {
    let m = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if m.dev() != dev {
        return Ok(());
    }
    if m.is_file() {
        out.push((path.to_path_buf(), m.ino()));
    } else if m.is_dir() {
        // The control directory holds snapshots, which never change.
        if path.file_name().is_some_and(|n| n == ".lsfs") {
            return Ok(());
        }
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", path.display()))?;
            collect_files(&e.path(), dev, out)?;
        }
    }
    Ok(())
}

/// The mount point of the lsfs mount that holds `path` (the deepest
/// `fuse.lsfs` mount in /proc/self/mountinfo that contains it).
fn lsfs_mount_of(path: &Path) -> Result<PathBuf, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mut best: Option<PathBuf> = None;
    for l in info.lines() {
        // "ID PARENT MAJ:MIN ROOT POINT OPTIONS ... - FSTYPE SOURCE SUPER"
        let Some((left, right)) = l.split_once(" - ") else {
            continue;
        };
        if right.split(' ').next() != Some("fuse.lsfs") {
            continue;
        }
        let Some(point) = left.split(' ').nth(4) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if path.starts_with(&point) && best.as_ref().is_none_or(|b| point.starts_with(b)) {
            best = Some(point);
        }
    }
    best.ok_or_else(|| format!("{} is not on a mounted lsfs", path.display()))
}

/// mountinfo's octal escapes (space, tab, newline, backslash).
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/mnt/a\\040b\\134c"), "/mnt/a b\\c");
    }
}
