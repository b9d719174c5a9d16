//! One read-write mount at a time: a read-write open creates the object
//! `lease` only if it does not exist (a conditional PUT, which S3, the
//! local directory store and the memory store all do atomically), and
//! deletes it when the device is dropped (at unmount). Another writer finds
//! it and is refused with what holds it. Read-only opens take no lease: any
//! number of them may read checkpoints and snapshots while the writer goes
//! on. A writer that died leaves its lease; the refusal says which object
//! to delete once that mount is known to be gone.

use crate::target::Target;
use object_store::{PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

pub const LEASE: &str = "lease";

/// Who holds the lease.
#[derive(Debug, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Seconds since the epoch.
    pub since: u64,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Take the lease of `t`, or say who holds it.
pub fn acquire(t: &Target, rt: &Runtime) -> Result<(), String> {
    let me = Holder {
        host: host(),
        pid: std::process::id(),
        since: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let body = serde_json::to_vec(&me).expect("a holder serializes");
    let opts = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let path = t.path(LEASE);
    match rt.block_on(t.store.put_opts(&path, PutPayload::from(body), opts)) {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let held = rt
                .block_on(async { t.store.get(&path).await?.bytes().await })
                .ok()
                .and_then(|b| serde_json::from_slice::<Holder>(&b).ok());
            let who = held.map_or("an unreadable lease".to_string(), |h| {
                format!(
                    "host {} pid {} since {} (seconds since the epoch)",
                    h.host, h.pid, h.since
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

/// Give the lease back (at unmount). A failure is logged: the next writer
/// will be told which object to delete.
pub fn release(t: &Target, rt: &Runtime) {
    if let Err(e) = rt.block_on(t.store.delete(&t.path(LEASE))) {
        tracing::warn!("{}: giving back the lease: {e}", t.url);
    }
}
