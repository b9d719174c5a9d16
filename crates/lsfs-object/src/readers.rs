//! Readers' holds: a read-only mount of checkpoint N tells the writer it
//! reads N, and the writer keeps N until it stops.
//!
//! The writer gives plain checkpoints up after `protection_secs`, or
//! sooner when space runs short, and a reader of one then gets EIO
//! (`tests/object_readers.rs`). Snapshots are never given up. So a reader
//! of checkpoint N writes the object `readers/<id>` ([`Hold`]: N, who,
//! and until when) at mount, rewrites it with a later `expires` every
//! third of the hold time, and deletes it at unmount; the writer looks at
//! `readers/` every [`WRITER_ROUND_SECS`] and promotes each held plain
//! checkpoint to a snapshot, and demotes it again once no live hold names
//! it. Which snapshots it made for holds is kept in the object
//! `readers-promoted` ([`PROMOTED`]), so a writer mounted later demotes
//! those too and never one the user made.
//!
//! The store is the only channel between them: a hold is a plain PUT of
//! one reader's own object, which no other mount writes, so no
//! conditional request is needed; `readers-promoted` is written by the
//! writer only, which holds the lease.

use crate::target::Target;
use lsfs_core::fs::Lsfs;
use object_store::{ObjectMeta, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Runtime;

/// The directory of hold objects, one per reader.
pub const DIR: &str = "readers";
/// The writer's record of the snapshots it made for holds: a JSON list
/// of checkpoint numbers.
pub const PROMOTED: &str = "readers-promoted";
/// `reader_hold_secs` when not set.
pub const DEFAULT_HOLD_SECS: u64 = 120;
/// Its largest value: a day. A reader that died holds its checkpoint
/// that long at most.
pub const MAX_HOLD_SECS: u64 = 86_400;
/// How far the writer's clock may be ahead of a reader's: a hold counts
/// until this long after its `expires`.
pub const SKEW_SECS: u64 = 5;
/// How often the writer looks at the holds.
pub const WRITER_ROUND_SECS: u64 = 10;
/// Expired holds are deleted by the writer this many hold times after
/// they expired (a reader that died, or lost the store at unmount).
pub const STALE_HOLD_TIMES: u64 = 10;

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One reader's hold: the object `readers/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The checkpoint the reader shows.
    pub cno: u64,
    pub host: String,
    pub pid: u32,
    /// When the reader mounted, seconds since the epoch.
    pub since: u64,
    /// Until when the hold counts, seconds since the epoch, unless the
    /// reader writes it again.
    pub expires: u64,
}

impl Hold {
    /// A hold on `cno` by this process, from `now` for `hold_secs`.
    pub fn new(cno: u64, now: u64, hold_secs: u64) -> Hold {
        Hold {
            cno,
            host: crate::lease::Holder::me().host,
            pid: std::process::id(),
            since: now,
            expires: now + hold_secs,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a hold serializes")
    }

    pub fn parse(bytes: &[u8]) -> Result<Hold, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// Whether the hold still counts at `now` (the writer's clock), with
    /// [`SKEW_SECS`] of grace for a reader whose clock is behind.
    pub fn is_live(&self, now: u64) -> bool {
        now <= self.expires.saturating_add(SKEW_SECS)
    }
}

/// A new hold's id: 16 hex digits.
pub fn new_id() -> String {
    format!("{:016x}", crate::wal::random_id())
}

fn hold_name(id: &str) -> String {
    format!("{DIR}/{id}")
}

/// Write hold `h` as `readers/<id>`.
pub fn put_hold(t: &Target, rt: &Runtime, id: &str, h: &Hold) -> Result<(), String> {
    let path = t.path(&hold_name(id));
    rt.block_on(t.store.put(&path, PutPayload::from(h.encode())))
        .map(|_| ())
        .map_err(|e| format!("{}: writing the reader's hold {path}: {e}", t.url))
}

/// Delete hold `id` (already gone is no error).
pub fn delete_hold(t: &Target, rt: &Runtime, id: &str) -> Result<(), String> {
    let path = t.path(&hold_name(id));
    match rt.block_on(t.store.delete(&path)) {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(format!("{}: deleting the reader's hold {path}: {e}", t.url)),
    }
}

/// One object under `readers/`, as the writer found it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The object's id (its name under `readers/`).
    pub id: String,
    /// When the store says it was last written.
    pub modified: u64,
    /// The hold, or why it does not parse.
    pub hold: Result<Hold, String>,
}

/// Every object under `readers/`, read.
pub fn list_holds(t: &Target, rt: &Runtime) -> Result<Vec<Listed>, String> {
    let dir = t.path(DIR);
    let objects: Vec<ObjectMeta> = match rt.block_on(t.store.list_with_delimiter(Some(&dir))) {
        Ok(l) => l.objects,
        // A local directory store has no `readers` directory until the
        // first reader writes one.
        Err(object_store::Error::NotFound { .. }) => Vec::new(),
        Err(e) => return Err(format!("{}: listing {DIR}/: {e}", t.url)),
    };
    let mut out = Vec::new();
    for o in objects {
        let id = o.location.filename().unwrap_or_default().to_string();
        let got = rt.block_on(async { t.store.get(&o.location).await?.bytes().await });
        let hold = match got {
            Ok(b) => Hold::parse(&b),
            // The reader unmounted between the LIST and the GET.
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(format!("{}: reading {}: {e}", t.url, o.location)),
        };
        out.push(Listed {
            id,
            modified: o.last_modified.timestamp().max(0) as u64,
            hold,
        });
    }
    Ok(out)
}

/// The snapshots the writers made for holds (`readers-promoted`); none if
/// the object is not there.
pub fn read_promoted(t: &Target, rt: &Runtime) -> Result<BTreeSet<u64>, String> {
    let path = t.path(PROMOTED);
    match rt.block_on(async { t.store.get(&path).await?.bytes().await }) {
        Ok(b) => serde_json::from_slice::<Vec<u64>>(&b)
            .map(|v| v.into_iter().collect())
            .map_err(|e| format!("{}: {path} does not parse: {e}", t.url)),
        Err(object_store::Error::NotFound { .. }) => Ok(BTreeSet::new()),
        Err(e) => Err(format!("{}: reading {path}: {e}", t.url)),
    }
}

/// Write `readers-promoted`.
pub fn write_promoted(t: &Target, rt: &Runtime, cnos: &BTreeSet<u64>) -> Result<(), String> {
    let path = t.path(PROMOTED);
    let body = serde_json::to_vec(&cnos.iter().collect::<Vec<_>>()).expect("numbers serialize");
    rt.block_on(t.store.put(&path, PutPayload::from(body)))
        .map(|_| ())
        .map_err(|e| format!("{}: writing {path}: {e}", t.url))
}

/// What the writer does about the holds it found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Plain checkpoints a live hold names: to promote.
    pub promote: Vec<u64>,
    /// Snapshots made for holds that no live hold names any more: to
    /// demote (those that are still snapshots).
    pub demote: Vec<u64>,
    /// Checkpoints in `readers-promoted` that are gone or no longer
    /// snapshots (given up after a demotion by hand, say): to forget.
    pub forget: Vec<u64>,
    /// Every checkpoint a live hold names that exists, with how many
    /// holds name it.
    pub held: BTreeMap<u64, usize>,
    /// Hold objects to delete: expired long ago, or unparsable and old.
    pub stale: Vec<String>,
}

/// The plan for the holds `listed` at `now`, given the checkpoints (cno
/// and whether it is a snapshot) and the snapshots made for holds.
pub fn plan(
    listed: &[Listed],
    now: u64,
    hold_secs: u64,
    checkpoints: &BTreeMap<u64, bool>,
    promoted: &BTreeSet<u64>,
) -> Plan {
    let mut p = Plan::default();
    let stale_after = hold_secs.max(1).saturating_mul(STALE_HOLD_TIMES);
    let mut live = BTreeSet::new();
    for l in listed {
        match &l.hold {
            Ok(h) if h.is_live(now) => {
                live.insert(h.cno);
                if checkpoints.contains_key(&h.cno) {
                    *p.held.entry(h.cno).or_default() += 1;
                }
            }
            Ok(h) => {
                if now > h.expires.saturating_add(stale_after) {
                    p.stale.push(l.id.clone());
                }
            }
            Err(_) => {
                if now > l.modified.saturating_add(stale_after) {
                    p.stale.push(l.id.clone());
                }
            }
        }
    }
    for (&cno, &snapshot) in checkpoints {
        if live.contains(&cno) && !snapshot {
            p.promote.push(cno);
        }
    }
    for &cno in promoted {
        match checkpoints.get(&cno) {
            Some(true) if !live.contains(&cno) => p.demote.push(cno),
            Some(true) => {}
            // Still held but plain (demoted by hand): promoted again
            // above, and kept in the list.
            Some(false) if live.contains(&cno) => {}
            _ => p.forget.push(cno),
        }
    }
    p
}

/// What the writer's rounds share with `lsfs stats`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HoldsStatus {
    /// Checkpoints live holds name, with how many holds name each.
    pub held: BTreeMap<u64, usize>,
    /// The snapshots made for holds (`readers-promoted`).
    pub promoted: Vec<u64>,
    /// When the last round ended, seconds since the epoch (0: none yet).
    pub last_round_secs: u64,
    /// Why the last round failed, if it did.
    pub last_error: Option<String>,
    pub promotions: u64,
    pub demotions: u64,
}

/// The writer's side: one round at a time, the store read and written
/// without the engine's lock, which is taken only to list the
/// checkpoints and to promote or demote.
pub struct Writer {
    t: Target,
    rt: Runtime,
    hold_secs: u64,
    /// `readers-promoted`, once read.
    promoted: Option<BTreeSet<u64>>,
    pub status: std::sync::Arc<Mutex<HoldsStatus>>,
    /// Called with each checkpoint promoted or demoted, after the change
    /// is durable (a mount has the kernel forget its snapshot directory).
    pub on_change: Option<Box<dyn Fn(u64) + Send>>,
}

impl Writer {
    pub fn new(t: &Target, hold_secs: u64) -> Result<Writer, String> {
        Ok(Writer {
            t: t.clone(),
            rt: small_runtime()?,
            hold_secs,
            promoted: None,
            status: Default::default(),
            on_change: None,
        })
    }

    /// Look at the holds once and promote and demote as they say.
    pub fn round(&mut self, fs: &Mutex<Lsfs>) -> Result<(), String> {
        let r = self.round_inner(fs);
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        st.last_round_secs = now_secs();
        st.last_error = r.as_ref().err().cloned();
        r
    }

    fn round_inner(&mut self, fs: &Mutex<Lsfs>) -> Result<(), String> {
        let (t, rt) = (&self.t, &self.rt);
        let mut promoted = match self.promoted.take() {
            Some(p) => p,
            None => read_promoted(t, rt)?,
        };
        let listed = list_holds(t, rt);
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                self.promoted = Some(promoted);
                return Err(e);
            }
        };
        for l in &listed {
            if let Err(e) = &l.hold {
                tracing::warn!(
                    "{}: the reader's hold {DIR}/{} does not parse, ignored: {e}",
                    t.url,
                    l.id
                );
            }
        }
        let checkpoints = list_checkpoints(fs);
        let p = plan(&listed, now_secs(), self.hold_secs, &checkpoints, &promoted);
        let before = promoted.clone();
        for cno in &p.forget {
            promoted.remove(cno);
        }
        // Named in `readers-promoted` before they are promoted: a writer
        // that stops between the two leaves a plain checkpoint in the
        // list, which the next one forgets, rather than a snapshot no
        // writer knows it made, which would be kept for ever.
        let mut adding: Vec<u64> = p
            .promote
            .iter()
            .copied()
            .filter(|c| !promoted.contains(c))
            .collect();
        promoted.extend(adding.iter().copied());
        if promoted != before {
            if let Err(e) = write_promoted(t, rt, &promoted) {
                self.promoted = Some(before);
                return Err(e);
            }
        }
        let mut failed = None;
        let mut done_promote = 0;
        for &cno in &p.promote {
            // Checked again under the lock: the user may have promoted it
            // meanwhile (then it is theirs) or it may be gone.
            let (r, io) = lsfs_core::fs::locked::call(fs, true, |fs| {
                match fs.checkpoints().iter().find(|e| e.cno == cno) {
                    Some(e) if !e.is_snapshot() => fs.snapshot_set(cno, true).map(|()| true),
                    _ => Ok(false),
                }
            });
            match r.and_then(|did| io.map(|()| did)) {
                Ok(true) => {
                    done_promote += 1;
                    if let Some(f) = &self.on_change {
                        f(cno);
                    }
                    tracing::info!(
                        "{}: checkpoint {cno} promoted to a snapshot: a reader holds it",
                        t.url
                    );
                }
                Ok(false) => {
                    if adding.contains(&cno) {
                        promoted.remove(&cno);
                    }
                }
                Err(e) => {
                    failed = Some(format!("promoting checkpoint {cno} for a reader: {e}"));
                    break;
                }
            }
        }
        adding.clear();
        let mut done_demote = 0;
        if failed.is_none() {
            for &cno in &p.demote {
                let (r, io) = lsfs_core::fs::locked::call(fs, true, |fs| {
                    match fs.checkpoints().iter().find(|e| e.cno == cno) {
                        Some(e) if e.is_snapshot() => fs.snapshot_set(cno, false).map(|()| true),
                        _ => Ok(false),
                    }
                });
                match r.and_then(|did| io.map(|()| did)) {
                    Ok(did) => {
                        promoted.remove(&cno);
                        if did {
                            done_demote += 1;
                            if let Some(f) = &self.on_change {
                                f(cno);
                            }
                            tracing::info!(
                                "{}: snapshot {cno} demoted to a plain checkpoint: no reader \
                                 holds it any more",
                                t.url
                            );
                        }
                    }
                    Err(e) => {
                        failed = Some(format!("demoting snapshot {cno}: {e}"));
                        break;
                    }
                }
            }
        }
        // Demoted ones leave the list after their demotion: a writer that
        // stops between the two leaves them listed, and the next demotes
        // them.
        let wrote = if promoted != before {
            write_promoted(t, rt, &promoted)
        } else {
            Ok(())
        };
        for id in &p.stale {
            match delete_hold(t, rt, id) {
                Ok(()) => tracing::info!("{}: deleted the expired reader's hold {DIR}/{id}", t.url),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        {
            let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
            st.held = p.held.clone();
            st.promoted = promoted.iter().copied().collect();
            st.promotions += done_promote;
            st.demotions += done_demote;
        }
        self.promoted = Some(promoted);
        if let Some(e) = failed {
            return Err(e);
        }
        wrote
    }
}

/// Every checkpoint of `fs` and whether it is a snapshot.
fn list_checkpoints(fs: &Mutex<Lsfs>) -> BTreeMap<u64, bool> {
    let g = fs.lock().unwrap_or_else(|p| p.into_inner());
    g.checkpoints()
        .iter()
        .map(|e| (e.cno, e.is_snapshot()))
        .collect()
}

/// The writer's rounds in a thread, every [`WRITER_ROUND_SECS`] (the
/// first at once), until the returned guard is dropped.
pub fn spawn_writer(
    mut w: Writer,
    fs: std::sync::Arc<Mutex<Lsfs>>,
    every: Duration,
) -> Result<Rounds, String> {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lsfs-holds".into())
        .spawn(move || loop {
            if let Err(e) = w.round(&fs) {
                tracing::warn!("readers' holds: {e}");
            }
            match stopped.recv_timeout(every) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        })
        .map_err(|e| format!("starting the readers' holds thread: {e}"))?;
    Ok(Rounds::new(stop, thread))
}

/// A thread that runs until this is dropped (which waits for it).
pub struct Rounds {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Rounds {
    /// `thread`, which ends once `stop` is dropped (its receiver then
    /// fails), as a `Rounds` that drops `stop` and waits for it.
    pub fn new(stop: mpsc::Sender<()>, thread: std::thread::JoinHandle<()>) -> Rounds {
        Rounds {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Rounds {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether a writer holds `t` now: its lease exists and names a mount not
/// known to be gone (`lease::Holder::is_gone`).
pub fn writer_holds(t: &Target) -> Result<bool, String> {
    let rt = small_runtime()?;
    Ok(crate::lease::holder(t, &rt)?.is_some_and(|h| !h.is_gone()))
}

fn small_runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the readers' holds runtime: {e}"))
}

/// A reader's hold while it is mounted: written at once, rewritten every
/// third of the hold time by a thread, deleted when this is dropped (at
/// unmount, also after Ctrl-C, which ends the mount normally).
pub struct ReaderHold {
    pub id: String,
    target: Target,
    rt: Arc<Runtime>,
    hold: Arc<Mutex<Hold>>,
    hold_secs: u64,
    _rounds: Rounds,
}

impl ReaderHold {
    /// Hold checkpoint `cno` of `t` for `hold_secs` at a time. The first
    /// write must succeed: a mount that cannot tell the writer it reads
    /// would lose its checkpoint without warning.
    pub fn take(t: &Target, cno: u64, hold_secs: u64) -> Result<ReaderHold, String> {
        let rt = Arc::new(small_runtime()?);
        let id = new_id();
        let h = Hold::new(cno, now_secs(), hold_secs);
        put_hold(t, &rt, &id, &h)?;
        let hold = Arc::new(Mutex::new(h));
        let (stop, stopped) = mpsc::channel::<()>();
        let every = Duration::from_secs(hold_secs.div_ceil(3).max(1));
        let (tt, tid, trt, th) = (t.clone(), id.clone(), rt.clone(), hold.clone());
        let thread = std::thread::Builder::new()
            .name("lsfs-hold".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        // Under the lock, so that a renewal never writes
                        // back a checkpoint `move_to` has just replaced.
                        let mut h = th.lock().unwrap_or_else(|p| p.into_inner());
                        h.expires = now_secs() + hold_secs;
                        // A failure is retried at the next renewal; the
                        // hold lasts a full hold time, so two more tries
                        // come before it expires.
                        if let Err(e) = put_hold(&tt, &trt, &tid, &h) {
                            tracing::warn!("{e}");
                        }
                    }
                    _ => {
                        if let Err(e) = delete_hold(&tt, &trt, &tid) {
                            tracing::warn!("{e} (it expires by itself)");
                        }
                        return;
                    }
                }
            })
            .map_err(|e| format!("starting the reader's hold thread: {e}"))?;
        Ok(ReaderHold {
            id,
            target: t.clone(),
            rt,
            hold,
            hold_secs,
            _rounds: Rounds::new(stop, thread),
        })
    }

    /// The checkpoint held now.
    pub fn cno(&self) -> u64 {
        self.hold.lock().unwrap_or_else(|p| p.into_inner()).cno
    }

    /// Hold checkpoint `cno` instead, from now on (the same object,
    /// written again at once): a reader that moves on to a newer
    /// checkpoint holds it before it opens it, and lets the older one go.
    /// On failure the hold in the store is unchanged.
    pub fn move_to(&self, cno: u64) -> Result<(), String> {
        let mut h = self.hold.lock().unwrap_or_else(|p| p.into_inner());
        let mut moved = h.clone();
        moved.cno = cno;
        moved.expires = now_secs() + self.hold_secs;
        put_hold(&self.target, &self.rt, &self.id, &moved)?;
        *h = moved;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, cno: u64, expires: u64) -> Listed {
        Listed {
            id: id.into(),
            modified: expires.saturating_sub(DEFAULT_HOLD_SECS),
            hold: Ok(Hold {
                cno,
                host: "h".into(),
                pid: 1,
                since: 0,
                expires,
            }),
        }
    }

    #[test]
    fn a_hold_encodes_and_parses() {
        let h = Hold::new(7, 1000, 120);
        assert_eq!((h.cno, h.since, h.expires), (7, 1000, 1120));
        assert_eq!(Hold::parse(&h.encode()).unwrap(), h);
        let v: serde_json::Value = serde_json::from_slice(&h.encode()).unwrap();
        for k in ["cno", "host", "pid", "since", "expires"] {
            assert!(v.get(k).is_some(), "{k} in {v}");
        }
        assert!(Hold::parse(b"{\"cno\": 3}").is_err());
        assert!(Hold::parse(b"not json").is_err());
        let id = new_id();
        assert!(
            id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
    }

    #[test]
    fn a_hold_counts_until_it_expires_and_the_skew_margin_after() {
        let h = Hold::new(7, 1000, 120);
        assert!(h.is_live(1000) && h.is_live(1120));
        assert!(h.is_live(1120 + SKEW_SECS));
        assert!(!h.is_live(1121 + SKEW_SECS));
    }

    #[test]
    fn the_plan_promotes_held_plain_checkpoints_and_demotes_only_its_own() {
        let now = 10_000;
        // 3 plain, 4 a user's snapshot, 5 promoted for a hold, 6 promoted
        // for a hold now expired, 8 in the list but gone.
        let cps: BTreeMap<u64, bool> = [(3, false), (4, true), (5, true), (6, true), (7, false)]
            .into_iter()
            .collect();
        let promoted: BTreeSet<u64> = [5, 6, 8].into_iter().collect();
        let l = vec![
            listed("a", 3, now + 60),
            listed("b", 4, now + 60),
            listed("c", 5, now + 60),
            listed("d", 5, now + 60),
            listed("e", 6, now - SKEW_SECS - 1),
            listed("f", 9, now + 60),
            // Expired long ago: deleted.
            listed("g", 7, now - 11 * 120),
            Listed {
                id: "h".into(),
                modified: now - 11 * 120,
                hold: Err("bad".into()),
            },
            Listed {
                id: "i".into(),
                modified: now,
                hold: Err("bad".into()),
            },
        ];
        let p = plan(&l, now, 120, &cps, &promoted);
        assert_eq!(p.promote, vec![3]);
        assert_eq!(p.demote, vec![6], "4 is the user's: never demoted");
        assert_eq!(p.forget, vec![8]);
        assert_eq!(
            p.held,
            [(3, 1), (4, 1), (5, 2)]
                .into_iter()
                .collect::<BTreeMap<_, _>>()
        );
        assert_eq!(p.stale, vec!["g".to_string(), "h".to_string()]);
    }
}
