//! FUSE over io_uring (Linux 6.14+): lsfs's own transport for the
//! requests, beside fuser's `/dev/fuse` loop.
//!
//! Why: each request through `/dev/fuse` wakes the server (its read()
//! returns) and then the caller (the reply's write()); on a VM whose idle
//! CPUs are dear to wake, the two cross-CPU wake-ups cost more than the
//! file system's own work (docs/PERFORMANCE.md). With io_uring the kernel
//! keeps one queue per CPU and hands a request to the queue of the
//! caller's CPU, whose thread is pinned there (`queue.rs`).
//!
//! fuser still mounts, answers FUSE_INIT (where the adapter asks for
//! `FUSE_OVER_IO_URING` and starts the queues: [`UringStart`]), sends the
//! notifications (`KernelCache`), and serves what the kernel sends through
//! `/dev/fuse` even with the ring in use: FORGET, BATCH_FORGET and
//! INTERRUPT (`fuse_dev_queue_forget` and `_interrupt` in the kernel's
//! ring operations), and every request until all queues have entries.
//! The operations themselves are `ops.rs`, shared by both transports;
//! this module only decodes and encodes (`dispatch.rs`, `reply.rs`, with
//! the kernel's layouts in `abi.rs`).

mod abi;
mod dispatch;
mod poll;
mod queue;
mod reply;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::KernelConfig;
use lsfs_vfs::Vfs;

use crate::contention::Contention;
use crate::ops::Ops;
use poll::Poll;
use queue::{QueueHandle, Shared};

/// Whether a mount serves FUSE requests through io_uring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UringMode {
    /// Only `/dev/fuse` (the default).
    #[default]
    Off,
    /// io_uring when the kernel and the privileges allow it, otherwise
    /// `/dev/fuse`; the log says which.
    Auto,
    /// io_uring, or the mount fails.
    On,
}

impl std::str::FromStr for UringMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(UringMode::Off),
            "auto" => Ok(UringMode::Auto),
            "on" => Ok(UringMode::On),
            _ => Err(format!("'{s}': expected off, auto or on")),
        }
    }
}

impl std::fmt::Display for UringMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UringMode::Off => "off",
            UringMode::Auto => "auto",
            UringMode::On => "on",
        })
    }
}

/// The payload buffer of each ring entry, and so the largest request or
/// reply: the kernel requires at least its max_write and max_pages, which
/// FUSE_INIT sets to this (256 pages, the kernel's default limit).
pub const PAYLOAD: usize = 1 << 20;

/// The kernel's switch for the transport: off by default; root can turn
/// it on, and it then applies to connections made after.
const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

/// Before mounting: can this mount use io_uring? Turns the kernel's
/// switch on if it is off and we may. `Ok(false)` means no, for `auto`;
/// for `on` that is an error saying why.
pub fn prepare(mode: UringMode, root: bool) -> io::Result<bool> {
    if mode == UringMode::Off {
        return Ok(false);
    }
    let why_not = match check(root) {
        Ok(()) => return Ok(true),
        Err(why) => why,
    };
    match mode {
        UringMode::On => Err(io::Error::other(format!(
            "cannot serve FUSE through io_uring: {why_not}"
        ))),
        _ => {
            tracing::info!("serving FUSE through /dev/fuse: {why_not}");
            Ok(false)
        }
    }
}

fn check(root: bool) -> Result<(), String> {
    // lsfs opens /dev/fuse itself only when it mounts as root; through
    // fusermount3 fuser keeps the descriptor to itself.
    if !root {
        return Err("only mounts made as root can".to_string());
    }
    let enabled = std::fs::read_to_string(ENABLE)
        .map_err(|e| format!("the kernel has no FUSE over io_uring ({ENABLE}: {e})"))?;
    if enabled.trim() != "Y" {
        std::fs::write(ENABLE, "Y").map_err(|e| format!("cannot turn on {ENABLE}: {e}"))?;
        tracing::info!("turned on {ENABLE}");
    }
    // io_uring itself may be off (kernel.io_uring_disabled) or refused
    // by a seccomp filter.
    io_uring::IoUring::<io_uring::squeue::Entry128, io_uring::cqueue::Entry>::builder()
        .build(2)
        .map_err(|e| format!("io_uring is not available: {e}"))?;
    Ok(())
}

/// What FUSE_INIT needs to ask for the transport and start its queues.
pub(crate) struct UringStart<V: Vfs> {
    mode: UringMode,
    dev: OwnedFd,
    ops: Arc<Ops<V>>,
    rings: Arc<Mutex<Option<Rings>>>,
    /// How long a queue thread polls after a request (`poll.rs`).
    spin: Duration,
    /// Polling stops while the CPUs are contended.
    contention: Arc<Contention>,
}

impl<V: Vfs + 'static> UringStart<V> {
    /// `dev` is a duplicate of the connection's `/dev/fuse` descriptor;
    /// the queues, once started, are put in `rings` for the mount to stop.
    pub(crate) fn new(
        mode: UringMode,
        dev: OwnedFd,
        ops: Arc<Ops<V>>,
        rings: Arc<Mutex<Option<Rings>>>,
        spin: Duration,
        contention: Arc<Contention>,
    ) -> Self {
        UringStart {
            mode,
            dev,
            ops,
            rings,
            spin,
            contention,
        }
    }

    /// In FUSE_INIT: ask for the transport and start the queues, which
    /// register their entries once the kernel has our reply.
    pub(crate) fn negotiate(self, config: &mut KernelConfig) -> io::Result<()> {
        let refuse = |why: String| {
            if self.mode == UringMode::On {
                tracing::error!("cannot serve FUSE through io_uring: {why}");
                Err(io::Error::other(why))
            } else {
                tracing::info!("serving FUSE through /dev/fuse: {why}");
                Ok(())
            }
        };
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING) {
            return refuse(format!("the kernel does not offer it ({missing:?})"));
        }
        // The kernel wants every entry's payload to hold max_write.
        if let Err(nearest) = config.set_max_write(PAYLOAD as u32) {
            return refuse(format!("max_write {PAYLOAD} refused (nearest {nearest})"));
        }
        match Rings::start(
            self.dev,
            self.ops.clone(),
            self.spin,
            self.contention.clone(),
        ) {
            Ok(rings) => {
                tracing::info!("FUSE over io_uring: {} queues", rings.queues.len());
                *self.rings.lock().unwrap() = Some(rings);
                Ok(())
            }
            Err(e) => refuse(format!("cannot start the ring queues: {e}")),
        }
    }
}

/// The running queues of a mount.
pub(crate) struct Rings {
    queues: Vec<QueueHandle>,
    shared: Arc<Shared>,
}

impl Rings {
    fn start<V: Vfs + 'static>(
        dev: OwnedFd,
        ops: Arc<Ops<V>>,
        spin: Duration,
        contention: Arc<Contention>,
    ) -> io::Result<Rings> {
        let n = possible_cpus()?;
        let dev = Arc::new(dev);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            serving: AtomicBool::new(false),
        });
        let mut rings = Rings {
            queues: Vec::with_capacity(n),
            shared: shared.clone(),
        };
        for qid in 0..n {
            let q = queue::spawn(
                qid as u16,
                dev.clone(),
                PAYLOAD,
                ops.clone(),
                shared.clone(),
                Poll::new(spin, Some(contention.clone())),
            );
            match q {
                Ok(q) => rings.queues.push(q),
                Err(e) => {
                    rings.stop();
                    return Err(e);
                }
            }
        }
        Ok(rings)
    }

    /// Stop the queues and wait for them (after the unmount: the kernel
    /// has given every entry back by then, or the ring's close takes them).
    pub(crate) fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for q in self.queues.drain(..) {
            queue::wake(&q.wake);
            if q.thread.join().is_err() {
                tracing::error!("a FUSE ring queue thread panicked");
            }
        }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How many queues the kernel makes: one per possible CPU
/// (`num_possible_cpus`), which /sys lists as ranges ("0-3,5").
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(s.trim())
        .ok_or_else(|| io::Error::other(format!("cannot read the CPU list '{}'", s.trim())))
}

fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_every_cpu() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,5,7-8"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    /// Without root the transport is refused: loudly for `on`, quietly
    /// (falling back) for `auto`; `off` never looks.
    #[test]
    fn prepare_refuses_without_root() {
        let e = prepare(UringMode::On, false).unwrap_err().to_string();
        assert!(e.contains("root"), "{e}");
        assert!(!prepare(UringMode::Auto, false).unwrap());
        assert!(!prepare(UringMode::Off, true).unwrap());
    }

    #[test]
    fn modes_parse() {
        assert_eq!("auto".parse(), Ok(UringMode::Auto));
        assert!("yes".parse::<UringMode>().is_err());
    }
}
