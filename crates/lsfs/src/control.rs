//! The control channel of a mounted file system: a Unix socket beside the
//! mount point (`<parent>/.<name>.lsfs.sock`, mode 0600) that only the
//! mounting user (or root) may use. One JSON request per line, one JSON reply
//! per line.
//!
//! Around the engine's own work it keeps the kernel in step: a checkpoint
//! or snapshot first has the kernel write back the mount's dirty pages
//! (syncfs), so it holds everything written before it was asked for; and a
//! change to the snapshots drops what the kernel cached of
//! `/.lsfs/snapshot`. Both happen without the engine's lock, which the FUSE
//! requests they cause need.

use lsfs_core::fs::snapview::SNAPSHOT_DIR_INO;
use lsfs_core::fs::Lsfs;
use lsfs_fuse::{KernelCache, RequestCounters};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where the control socket of the mount at `mountpoint` lives.
pub fn socket_path(mountpoint: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    abs.parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".{name}.lsfs.sock"))
}

/// The FUSE side of a mount, as the control socket needs it.
pub struct FuseSide {
    pub mountpoint: PathBuf,
    /// The requests the mount served, shown by "stats".
    pub counters: Arc<RequestCounters>,
    pub kernel_cache: Arc<KernelCache>,
    /// What the writer found of readers' holds on an object store (none
    /// on other devices, on a read-only mount, or with holds off).
    pub readers: Option<Arc<Mutex<lsfs_object::readers::HoldsStatus>>>,
}

/// The socket file a mount bound, to remove when it ends.
pub struct SocketFile {
    path: PathBuf,
    /// Its device and inode numbers: a mount made on the same mount point
    /// just after this one was unmounted binds a new file at the same
    /// path, which this one must not remove on its way out.
    id: (u64, u64),
}

impl SocketFile {
    /// Bind a listener at `path` (for its owner only), replacing what was
    /// there.
    fn bind(path: PathBuf) -> std::io::Result<(UnixListener, SocketFile)> {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let id = Self::id_of(&path)
            .ok_or_else(|| std::io::Error::other(format!("{} vanished", path.display())))?;
        Ok((listener, SocketFile { path, id }))
    }

    fn id_of(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    }

    /// Remove the file, if it is still the one this mount bound.
    pub fn remove(self) {
        if Self::id_of(&self.path) == Some(self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Serve requests until the process ends.
pub fn serve(fs: Arc<Mutex<Lsfs>>, fuse: FuseSide) -> std::io::Result<SocketFile> {
    let (listener, file) = SocketFile::bind(socket_path(&fuse.mountpoint))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let owner = unsafe { libc::geteuid() };
    std::thread::Builder::new()
        .name("lsfs-control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                if peer_uid(&conn).is_some_and(|u| u == owner || u == 0) {
                    let _ = handle(&fs, &fuse, conn);
                }
            }
        })?;
    Ok(file)
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the given length.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

fn handle(fs: &Arc<Mutex<Lsfs>>, fuse: &FuseSide, conn: UnixStream) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    for line in BufReader::new(conn).lines() {
        let line = line?;
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(req) => {
                let cmd = req.get("cmd").and_then(Value::as_str).unwrap_or("");
                if matches!(cmd, "checkpoint" | "snapshot") {
                    write_back(fs, fuse);
                }
                // The device work runs after the lock is let go; a
                // checkpoint or snapshot is durable before the reply.
                let durable = matches!(
                    cmd,
                    "checkpoint" | "snapshot" | "promote" | "demote" | "delete"
                );
                let (r, done) = lsfs_core::fs::locked::call(fs, durable, |fs| execute(fs, &req));
                let r = r.and_then(|v| done.map(|()| v).map_err(|e| e.to_string()));
                match r {
                    Ok(mut v) => {
                        match cmd {
                            "stats" => {
                                v["stats"]["fuse"] = fuse_stats(&fuse.counters);
                                if let Some(r) = &fuse.readers {
                                    let r = r.lock().unwrap_or_else(|p| p.into_inner());
                                    v["stats"]["readers"] = json!(*r);
                                }
                            }
                            "snapshot" => forget_snapshot(&fuse.kernel_cache, v["cno"].as_u64()),
                            "promote" | "demote" | "delete" => {
                                forget_snapshot(&fuse.kernel_cache, req["cno"].as_u64())
                            }
                            _ => {}
                        }
                        v
                    }
                    Err(e) => json!({ "ok": false, "error": e }),
                }
            }
            Err(e) => json!({ "ok": false, "error": format!("bad request: {e}") }),
        };
        writeln!(out, "{reply}")?;
    }
    Ok(())
}

/// Have the kernel send the mount's dirty pages (and the times it keeps
/// for them) before a checkpoint is taken, and wait until lsfs has them,
/// so that the checkpoint holds every write() that returned before it was
/// asked for. The FUSE thread serves those writes, so the engine's lock
/// must not be held here.
///
/// syncfs alone is not enough: on a FUSE mount it starts the writeback but
/// does not wait for the server to have received the WRITEs (the kernel
/// skips the data-integrity wait for FUSE mappings, and forwards syncfs
/// only to virtiofs). Invalidating a file's pages does wait: the kernel
/// writes each dirty page back and waits for the reply before it drops the
/// page. So after the syncfs has started everything at once, every regular
/// file the kernel holds is invalidated; the price is that their cached
/// pages are read again later.
fn write_back(fs: &Arc<Mutex<Lsfs>>, fuse: &FuseSide) {
    let mountpoint = &fuse.mountpoint;
    let r = std::fs::File::open(mountpoint).and_then(|d| {
        // SAFETY: syncfs on a descriptor we own.
        if unsafe { libc::syncfs(d.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    });
    if let Err(e) = r {
        // The checkpoint still holds everything that reached lsfs.
        tracing::warn!(
            "syncfs of {} before a checkpoint: {e}",
            mountpoint.display()
        );
    }
    let held = fs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .kernel_held_files();
    for ino in held {
        match fuse.kernel_cache.invalidate_inode(ino) {
            // The kernel forgot the inode meanwhile: nothing of it is cached.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => tracing::warn!("writing back inode {ino} before a checkpoint: {e}"),
            Ok(()) => {}
        }
    }
}

/// The kernel forgets what it cached of `/.lsfs/snapshot` (its listing and
/// the name of snapshot `cno`, present or missing): a snapshot came or went.
pub fn forget_snapshot(cache: &KernelCache, cno: Option<u64>) {
    let mut r = cache.invalidate_inode(SNAPSHOT_DIR_INO);
    if let Some(cno) = cno {
        r = r.and(cache.invalidate_entry(SNAPSHOT_DIR_INO, cno.to_string().as_bytes()));
    }
    if let Err(e) = r {
        tracing::warn!("cannot drop the kernel's cache of the snapshot directory: {e}");
    }
}

/// Run one request against a file system (mounted or opened offline).
pub fn execute(fs: &mut Lsfs, req: &Value) -> Result<Value, String> {
    let cno = || {
        req.get("cno")
            .and_then(Value::as_u64)
            .ok_or_else(|| "missing \"cno\" (a checkpoint number)".to_string())
    };
    let s = |e: lsfs_core::Error| e.to_string();
    match req.get("cmd").and_then(Value::as_str).unwrap_or("") {
        "checkpoint" => Ok(json!({ "ok": true, "cno": fs.checkpoint().map_err(s)? })),
        "snapshot" => Ok(json!({ "ok": true, "cno": fs.snapshot_create().map_err(s)? })),
        "promote" => fs.snapshot_set(cno()?, true).map(|_| json!({ "ok": true })).map_err(s),
        "demote" => fs.snapshot_set(cno()?, false).map(|_| json!({ "ok": true })).map_err(s),
        "delete" => fs.checkpoint_delete(cno()?).map(|_| json!({ "ok": true })).map_err(s),
        "list" => Ok(json!({ "ok": true, "checkpoints": fs.checkpoints() })),
        "stats" => Ok(json!({ "ok": true, "stats": stats(fs) })),
        "gc-status" => Ok(json!({ "ok": true, "status": gc_status(fs) })),
        "trim" => {
            let n = |k: &str, d: u64| req.get(k).and_then(Value::as_u64).unwrap_or(d);
            let bytes = fs.trim_free_space(n("start", 0), n("len", u64::MAX), n("minlen", 0)).map_err(s)?;
            Ok(json!({ "ok": true, "trimmed_bytes": bytes }))
        }
        "defrag" => {
            let ino = req.get("ino").and_then(Value::as_u64).ok_or("missing \"ino\" (an inode number)")?;
            let force = req.get("force").and_then(Value::as_bool).unwrap_or(false);
            let d = fs.defrag_file(ino, force).map_err(|e| format!("inode {ino}: {e}"))?;
            Ok(json!({ "ok": true, "defrag": d }))
        }
        "gc-run" => {
            let n = req.get("segments").and_then(Value::as_u64).unwrap_or(fs.cleaner.config.segments_per_pass as u64);
            let rep = fs.clean(n.clamp(1, 256) as usize, "manual").map_err(s)?;
            Ok(json!({ "ok": true, "pass": rep }))
        }
        "gc-stats" => {
            fs.refresh_cleaner_stats();
            Ok(json!({ "ok": true, "write_amplification": fs.write_amplification(), "stats": fs.cleaner.stats, "histogram": fs.store.utilization_histogram(),
                       "census": fs.store.segment_census(), "threaded_logging": fs.cleaner.config.threaded_logging,
                       "object_store": object_store_counters(fs) }))
        }
        "gc-start" | "gc-stop" => {
            fs.cleaner.enabled = req["cmd"] == "gc-start";
            Ok(json!({ "ok": true, "enabled": fs.cleaner.enabled }))
        }
        "gc-policy" => {
            let p = req.get("policy").and_then(Value::as_str).ok_or("missing \"policy\"")?;
            fs.cleaner.set_policy(p)?;
            Ok(json!({ "ok": true, "policy": fs.cleaner.policy_name() }))
        }
        "gc-threaded" => {
            let m = req.get("mode").and_then(Value::as_str).ok_or("missing \"mode\"")?;
            fs.set_threaded_logging(m)?;
            Ok(json!({ "ok": true, "threaded_logging": fs.cleaner.config.threaded_logging }))
        }
        other => Err(format!("unknown command '{other}' (checkpoint, snapshot, promote, demote, delete, list, stats, trim, defrag, gc-status, gc-run, gc-stats, gc-start, gc-stop, gc-policy, gc-threaded)")),
    }
}

/// What `lsfs gc status` shows.
pub fn gc_status(fs: &Lsfs) -> Value {
    json!({
        "enabled": fs.cleaner.enabled,
        "policy": fs.cleaner.policy_name(),
        "free_percent": fs.free_percent(),
        "config": fs.cleaner.config,
        "on_battery": fs.cleaner.on_battery(),
        "last_pass": fs.cleaner.last_pass,
    })
}

/// An object store's requests and bytes since mount (null on other
/// devices), and under `cleaner` what the cleaner's share of them was:
/// the GETs its reads of victims (and of the DAT) made, the bytes of its
/// copies (part of the segments the log PUTs), and the DELETEs of the
/// objects of the segments it freed (segments discarded).
fn object_store_counters(fs: &Lsfs) -> Value {
    let c = fs.store.device_extra_counters();
    if c.is_empty() {
        return Value::Null;
    }
    let mut cleaner = serde_json::Map::new();
    let mut all = serde_json::Map::new();
    for (k, v) in c {
        match k.strip_prefix("cleaner_") {
            Some(k) => cleaner.insert(k.to_string(), json!(v)),
            None => all.insert(k.to_string(), json!(v)),
        };
    }
    let block = lsfs_core::layout::BLOCK_BYTES as u64;
    cleaner.insert(
        "copied_bytes".into(),
        json!(fs.cleaner.stats.blocks_copied * block),
    );
    cleaner.insert(
        "deletes".into(),
        json!(fs.store.discard_stats().cleaned_segments),
    );
    all.insert("cleaner".into(), Value::Object(cleaner));
    Value::Object(all)
}

/// What `lsfs stats` shows.
pub fn stats(fs: &Lsfs) -> Value {
    let st = &fs.store;
    json!({
        "write_amplification": fs.write_amplification(),
        "device": st.device_counters(),
        "io": st.io().counters(),
        "object_store": object_store_counters(fs),
        "discard": st.discard_stats(),
        "store": st.stats(),
        "cache": { "capacity_blocks": st.cache().capacity_blocks(), "resident_blocks": st.cache().len(),
                   "dirty_blocks": st.cache().dirty_count(), "hits": st.cache().hits, "misses": st.cache().misses },
        "segments": { "total": st.geo().nsegments, "free": st.segs().free_count(), "segment_blocks": st.geo().segment_blocks,
                      "live_blocks": st.segs().held().0, "snapshot_blocks": st.segs().held().1 },
        // A read-only view shows one checkpoint; "current" is the
        // newest the store held when it opened.
        "checkpoint": { "current": st.roots().cur_cno, "count": st.cps().entries.len(),
                        "shown": fs.shown_checkpoint() },
        "blocks_used": st.roots().blocks_used,
        "inodes_used": st.roots().inodes_used,
        // What new records of user data are compressed with: off, lz4, zstd.
        "compress": st.compressing().map_or("off".to_string(), |m| m.name()),
        // Deleted files whose blocks the background is still freeing
        // (counted in live_blocks until then, so not free in statfs).
        "deletes": { "reclaiming_files": fs.reclaim_status().files, "reclaiming_blocks": fs.reclaim_status().blocks,
                     "since_mount": fs.delete_stats() },
        // Files laid out again when idle (fs/compaction.rs).
        "compaction": fs.compaction_stats(),
        "read_only_reason": st.failure(),
        // A read-only view of a checkpoint on an object store: how often it
        // opened the store again to follow blocks the writer moved.
        "view_follows": fs.view_follows(),
        // A reader of an object store's newest checkpoint: how often it
        // moved on to a newer one (reader_follow.rs).
        "view_moves": fs.view_moves(),
        "memory": memory(fs),
    })
}

/// The FUSE requests the mount served, by opcode (only those that came),
/// how many of them came through io_uring, how many GETXATTRs were the
/// kernel's `security.capability` probe, and how the server polled.
pub fn fuse_stats(counters: &RequestCounters) -> Value {
    let by_op: serde_json::Map<String, Value> = counters
        .snapshot()
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(op, n)| (op.name().to_string(), json!(n)))
        .collect();
    json!({
        "requests": by_op,
        "total": counters.total(),
        "through_io_uring": counters.ring_requests(),
        "getxattr_security_capability": counters.capability_probes(),
        // Spells of polling (/dev/fuse's or the ring's), and holds of it
        // while the CPUs were contended (lsfs-fuse's contention.rs).
        "polling_spells": counters.polling_spells(),
        "polling_holds": counters.polling_holds(),
    })
}

/// The mount's in-memory structures and their bounds (`Lsfs::memory`).
fn memory(fs: &Lsfs) -> Value {
    let items = fs.memory();
    json!({
        "bytes": items.iter().map(|i| i.bytes).sum::<u64>(),
        "bound_bytes": items.iter().map(|i| i.max_bytes).sum::<u64>(),
        "items": items,
    })
}

/// Send one request to the mount at `mountpoint`.
pub fn request(mountpoint: &Path, req: &Value) -> Result<Value, String> {
    let path = socket_path(mountpoint);
    let mut s = UnixStream::connect(&path).map_err(|e| {
        format!(
            "cannot reach the lsfs mount at {} (control socket {}): {e}",
            mountpoint.display(),
            path.display()
        )
    })?;
    writeln!(s, "{req}").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&line).map_err(|e| format!("bad reply: {e}"))?;
    if v.get("ok") == Some(&Value::Bool(true)) {
        Ok(v)
    } else {
        Err(v
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("request failed")
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsfs_core::device::MemDevice;
    use lsfs_core::fs::MountConfig;
    use lsfs_core::meta::open::MkfsOptions;

    fn fs() -> Lsfs {
        let dev = Box::new(MemDevice::new(128 << 20));
        Lsfs::mkfs(dev, &MkfsOptions::default(), MountConfig::default()).unwrap()
    }

    /// `lsfs gc threaded MODE` switches the mode of a running cleaner, and a
    /// mode that does not exist is refused naming the valid ones.
    #[test]
    fn threaded_logging_switches_at_run_time() {
        let mut fs = fs();
        assert_eq!(fs.cleaner.config.threaded_logging.name(), "off");
        for mode in ["always", "adaptive", "off"] {
            let r = execute(&mut fs, &json!({ "cmd": "gc-threaded", "mode": mode })).unwrap();
            assert_eq!(r["threaded_logging"], mode);
            assert_eq!(fs.cleaner.config.threaded_logging.name(), mode);
        }
        let err = execute(
            &mut fs,
            &json!({ "cmd": "gc-threaded", "mode": "sometimes" }),
        )
        .unwrap_err();
        assert!(err.contains("off, adaptive, always"), "{err}");
        assert_eq!(
            fs.cleaner.config.threaded_logging.name(),
            "off",
            "a refused mode changed the setting"
        );
        let err = execute(&mut fs, &json!({ "cmd": "gc-threaded" })).unwrap_err();
        assert!(err.contains("mode"), "{err}");
        let status = gc_status(&fs);
        assert_eq!(status["config"]["threaded_logging"], "off");
    }

    /// A mount made on the same mount point right after an unmount binds
    /// its socket before the old server is gone: the old one must leave
    /// the new file alone on its way out.
    #[test]
    fn a_server_removes_only_its_own_socket_file() {
        let dir = std::env::temp_dir().join(format!("lsfs-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".mnt.lsfs.sock");
        let (_old_listener, old) = SocketFile::bind(path.clone()).unwrap();
        let (_new_listener, new) = SocketFile::bind(path.clone()).unwrap();
        old.remove();
        assert!(
            path.exists(),
            "the old server removed the new server's socket"
        );
        UnixStream::connect(&path).expect("the new socket still answers");
        new.remove();
        assert!(!path.exists(), "a server's own socket is removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
