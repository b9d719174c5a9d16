//! One read-write mount at a time: a read-write open creates the object
//! `lease` only if it does not exist (a conditional PUT, which S3, the
//! local directory store and the memory store all do atomically), and
//! deletes it when the device is dropped (at unmount). Another writer finds
//! it and is refused with what holds it. Read-only opens take no lease: any
//! number of them may read checkpoints and snapshots while the writer goes
//! on.
//!
//! A writer that died leaves its lease, and so does one that unmounted
//! while the store was unreachable (the delete failed too). A lease whose
//! holder ran on this machine, in this boot, as a process that is no
//! longer there (its pid gone, or reused: the start time differs) is taken
//! over, with a PUT conditional on the lease being the one read, so that
//! two mounts taking it over at once cannot both win. Any other lease is
//! refused, and the refusal says which object to delete once that mount
//! is known to be gone. (Containers that share a kernel, a hostname and a
//! bucket but not their process ids would see each other's holders as
//! gone: give them hostnames of their own.)
//!
//! A mount with a write-ahead file (`wal.rs`) names the file and its id in
//! the lease: its acknowledged writes may be in that file only, so a
//! mount without it does not take such a lease over (it would write over
//! what the file still has to store), and a mount with it on the same
//! host does, also after a reboot: that mount holds the file's lock, so
//! the lease's holder is not running.

use crate::target::Target;
use object_store::{PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

pub const LEASE: &str = "lease";

/// Who holds the lease.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Seconds since the epoch.
    pub since: u64,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): which
    /// boot of which machine `pid` belongs to. Absent in leases written
    /// before it was recorded: those are never taken over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// The process's start time (clock ticks since boot, `/proc/PID/stat`):
    /// tells the holder from a later process given the same pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    /// The write-ahead file of the mount (`HOST:PATH`), if it has one, or
    /// [`IN_STORE`] for a mount that keeps its flush records in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal: Option<String>,
    /// That file's id (random, in its header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_id: Option<u64>,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
}

/// When process `pid` started (field 22 of `/proc/PID/stat`), if it runs.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')'. Field 3, the state, comes first after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

impl Holder {
    /// This process, as the holder of a lease.
    pub fn me() -> Holder {
        let pid = std::process::id();
        Holder {
            host: host(),
            pid,
            since: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            boot: boot_id(),
            start: process_start(pid),
            wal: None,
            wal_id: None,
        }
    }

    /// This process, as a holder writing the write-ahead file `path`
    /// whose id is `id`.
    pub fn with_wal(path: &std::path::Path, id: u64) -> Holder {
        Holder {
            wal: Some(format!("{}:{}", host(), path.display())),
            wal_id: Some(id),
            ..Holder::me()
        }
    }

    /// This process, as a holder that keeps its flush records in the store
    /// (`store_log.rs`). Named in `wal` so that a build that does not know
    /// such records refuses to take a dead holder's lease over (it would
    /// write over the store without replaying them); a build that knows
    /// them replays them whatever its own mode, so takes it over.
    pub fn with_records_in_store() -> Holder {
        Holder {
            wal: Some(IN_STORE.to_string()),
            ..Holder::me()
        }
    }

    /// Whether the holder keeps a write-ahead file on its own host (not
    /// records in the store, which any mount replays).
    fn has_local_wal(&self) -> bool {
        self.wal.as_deref().is_some_and(|w| w != IN_STORE)
    }

    /// Whether the holder is known to be gone: it ran on this machine in
    /// this boot, and its process is not running now. Anything not known
    /// (another machine, another boot, a lease without boot id or start
    /// time) is taken as alive.
    pub fn is_gone(&self) -> bool {
        let (Some(boot), Some(start)) = (&self.boot, self.start) else {
            return false;
        };
        self.host == host()
            && boot_id().as_ref() == Some(boot)
            && process_start(self.pid) != Some(start)
    }
}

/// `Holder::wal` of a mount whose flush records are in the store.
pub const IN_STORE: &str = "store";

/// Take the lease of `t` as `me`, or say who holds it.
pub fn acquire(t: &Target, rt: &Runtime, me: &Holder) -> Result<(), String> {
    let body = serde_json::to_vec(me).expect("a holder serializes");
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let path = t.path(LEASE);
    match rt.block_on(
        t.store
            .put_opts(&path, PutPayload::from(body.clone()), opts),
    ) {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let got = rt.block_on(async {
                let r = t.store.get(&path).await?;
                let meta = r.meta.clone();
                Ok::<_, object_store::Error>((r.bytes().await?, meta))
            });
            let (held, meta) = match got {
                Ok((b, meta)) => (serde_json::from_slice::<Holder>(&b).ok(), Some(meta)),
                Err(_) => (None, None),
            };
            if let (Some(h), Some(meta)) = (&held, meta) {
                // The lease of this very write-ahead file, written on this
                // host: whoever wrote it is gone, as the file's lock is
                // ours. (A copy of the file on another host proves
                // nothing about the mount there.)
                let same_wal = me.wal_id.is_some() && h.wal_id == me.wal_id && h.host == host();
                if h.has_local_wal() && !same_wal && h.is_gone() {
                    return Err(format!(
                        "{}: the mount that held it (pid {} on host {}) is gone, but its \
                         write-ahead file {} may hold acknowledged writes not yet in the store. \
                         Mount read-write on that host with object_wal set to that file to store \
                         them; or, to give them up, delete the object {}/{LEASE}",
                        t.url,
                        h.pid,
                        h.host,
                        h.wal.as_deref().unwrap_or_default(),
                        t.url.trim_end_matches('/')
                    ));
                }
                if same_wal || h.is_gone() {
                    // Replace exactly the lease read: if another mount took
                    // it over meanwhile, this PUT fails and this one is
                    // refused.
                    let opts = PutOptions {
                        mode: PutMode::Update(UpdateVersion {
                            e_tag: meta.e_tag,
                            version: meta.version,
                        }),
                        ..Default::default()
                    };
                    match rt.block_on(t.store.put_opts(&path, PutPayload::from(body), opts)) {
                        Ok(_) => {
                            tracing::warn!(
                                "{}: took over the lease of pid {} on this host since {}, \
                                 which is no longer running (it did not give the lease back)",
                                t.url,
                                h.pid,
                                h.since
                            );
                            return Ok(());
                        }
                        Err(e) => tracing::warn!(
                            "{}: the lease's holder, pid {} on this host, is gone, \
                             but taking the lease over failed: {e}",
                            t.url,
                            h.pid
                        ),
                    }
                }
            }
            let who = held.map_or("an unreadable lease".to_string(), |h| {
                format!(
                    "host {} pid {} since {} (seconds since the epoch){}",
                    h.host,
                    h.pid,
                    h.since,
                    match h.wal.as_deref() {
                        Some(IN_STORE) => ", with its flush records in the store".to_string(),
                        Some(w) => format!(", with the write-ahead file {w}"),
                        None => String::new(),
                    }
                )
            });
            Err(format!(
                "{} is mounted read-write elsewhere: its lease is held by {who}. \
                 Mount it read-only, or, once that mount is known to be gone, delete the object {}/{LEASE}",
                t.url,
                t.url.trim_end_matches('/')
            ))
        }
        Err(e) => Err(format!("{}: taking the lease: {e}", t.url)),
    }
}

/// Who holds the lease of `t` now, if anyone (`None` also when it does
/// not parse).
pub fn holder(t: &Target, rt: &Runtime) -> Result<Option<Holder>, String> {
    match rt.block_on(async { t.store.get(&t.path(LEASE)).await?.bytes().await }) {
        Ok(b) => Ok(serde_json::from_slice(&b).ok()),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(format!("{}: reading the lease: {e}", t.url)),
    }
}

/// Give the lease back (at unmount). A failure is logged: the next writer
/// will be told which object to delete.
pub fn release(t: &Target, rt: &Runtime) {
    if let Err(e) = rt.block_on(t.store.delete(&t.path(LEASE))) {
        tracing::warn!("{}: giving back the lease: {e}", t.url);
    }
}
