//! `lsfs mount -o` and the `-o` of `mount -t fuse.lsfs` and `/etc/fstab`:
//! the comma-separated mount options, checked when the command line is
//! parsed. Later options override earlier ones, as with mount(8).
//!
//! Three kinds are accepted: lsfs's own (`ro`, `rw`, the writeback cache,
//! and `key=value` forms of the `lsfs mount` flags), the kernel's generic
//! ones that every file system takes (`nosuid`, `noexec`, `noatime`, …:
//! mount(8) adds `nosuid,nodev,noexec` for a `user` mount, mount.fuse3 adds
//! `dev,suid` for root), and the ones meant for mount(8), systemd or the
//! reader of fstab (`defaults`, `noauto`, `nofail`, `_netdev`, `x-*`,
//! `comment=*`), which say nothing to the file system and are ignored.
//! Anything else is an error naming the option, so a typo in fstab is
//! found at the first mount, not guessed around.

use lsfs_core::meta::discard::DiscardMode;
use lsfs_core::meta::store::Compress;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// What `-o` sets. `None` leaves the choice to a flag or the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOpts {
    pub read_only: bool,
    /// The kernel's writeback cache (`writeback_cache`, the default, or
    /// `no_writeback_cache`).
    pub writeback_cache: bool,
    /// F2FS's atomic-write ioctls (`atomic_writes`, the default, or
    /// `no_atomic_writes`, which answers them ENOTTY as a file system
    /// without them: SQLite then keeps its rollback journal).
    pub atomic_writes: bool,
    /// `checkpoint=N`: mount this checkpoint or snapshot read-only.
    pub checkpoint: Option<u64>,
    /// `cache_size=SIZE`: the block cache.
    pub cache_size: Option<u64>,
    /// `threads=N`: FUSE threads (1..=16).
    pub threads: Option<u16>,
    /// `spin_us=N`: microseconds of polling (0..=100000).
    pub spin_us: Option<u32>,
    /// `ring_spin_us=N`: microseconds of polling by the ring's queue
    /// threads (0..=100000).
    pub ring_spin_us: Option<u32>,
    /// `uring=off|auto|on`: serve FUSE requests through io_uring.
    pub uring: Option<lsfs_fuse::UringMode>,
    /// `config=FILE`: a TOML file of mount settings.
    pub config: Option<PathBuf>,
    /// `discard=off|on|batched` (`discard` is on, `nodiscard` off): what
    /// freed segments the device is told to drop by itself.
    pub discard: Option<DiscardMode>,
    /// `compress=off|lz4|zstd|zstd:N` (`nocompress` is off): whether, and
    /// with which codec and zstd level, records of user data are
    /// compressed (docs/CONFIG.md).
    pub compress: Option<Compress>,
    /// `object_wal=PATH`: an object store's write-ahead file, `store` for
    /// flush records kept in the store itself (the default), or `off`.
    pub object_wal: Option<PathBuf>,
    /// `object_wal_bytes=SIZE`: its bound.
    pub object_wal_bytes: Option<u64>,
    /// `object_disk_cache=DIR`: an object store's segments cached on disk.
    pub object_disk_cache: Option<PathBuf>,
    /// `object_disk_cache_bytes=SIZE`: its bound.
    pub object_disk_cache_bytes: Option<u64>,
    /// `reader_hold_secs=N`: how long a read-only mount's hold on its
    /// checkpoint lasts between renewals, on an object store (0: no holds).
    pub reader_hold_secs: Option<u64>,
    /// `reader_follow_secs=N`: how often a reader of an object store's
    /// newest checkpoint looks for a newer one (0: it stays).
    pub reader_follow_secs: Option<u64>,
    /// `allow_other`: let other users in (root's mounts always do).
    pub allow_other: bool,
    /// The kernel's generic mount flags (`MS_NOSUID`, …) asked for.
    pub kernel_flags: libc::c_ulong,
    /// The options that mean nothing to lsfs and were dropped, to say so.
    pub ignored: Vec<String>,
    /// The options as given, to pass on to a background server.
    given: String,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts {
            read_only: false,
            writeback_cache: true,
            atomic_writes: true,
            checkpoint: None,
            cache_size: None,
            threads: None,
            spin_us: None,
            ring_spin_us: None,
            uring: None,
            config: None,
            discard: None,
            compress: None,
            object_wal: None,
            object_wal_bytes: None,
            object_disk_cache: None,
            object_disk_cache_bytes: None,
            reader_hold_secs: None,
            reader_follow_secs: None,
            allow_other: false,
            kernel_flags: 0,
            ignored: Vec::new(),
            given: String::new(),
        }
    }
}

const KNOWN: &str = "ro, rw, writeback_cache, no_writeback_cache, atomic_writes, \
    no_atomic_writes, checkpoint=N, cache_size=SIZE, threads=N, spin_us=N, ring_spin_us=N, \
    uring=off|auto|on, \
    config=FILE, discard=off|on|batched, [no]discard, compress=off|lz4|zstd|zstd:N, nocompress, \
    object_wal=store|PATH|off, object_wal_bytes=SIZE, object_disk_cache=DIR, object_disk_cache_bytes=SIZE, \
    reader_hold_secs=N, reader_follow_secs=N, allow_other, default_permissions, \
    [no]suid, [no]dev, [no]exec, [no]atime, [no]diratime, relatime, strictatime, sync, \
    async, dirsync; ignored: defaults, [no]auto, nofail, [no]user, users, owner, group, \
    _netdev, x-*, comment=*";

/// The generic mount flags: (name, flag, whether the name sets or clears it).
const KERNEL_FLAGS: &[(&str, libc::c_ulong, bool)] = &[
    ("nosuid", libc::MS_NOSUID, true),
    ("suid", libc::MS_NOSUID, false),
    ("nodev", libc::MS_NODEV, true),
    ("dev", libc::MS_NODEV, false),
    ("noexec", libc::MS_NOEXEC, true),
    ("exec", libc::MS_NOEXEC, false),
    ("noatime", libc::MS_NOATIME, true),
    ("atime", libc::MS_NOATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, true),
    ("diratime", libc::MS_NODIRATIME, false),
    ("relatime", libc::MS_RELATIME, true),
    ("strictatime", libc::MS_STRICTATIME, true),
    ("sync", libc::MS_SYNCHRONOUS, true),
    ("async", libc::MS_SYNCHRONOUS, false),
    ("dirsync", libc::MS_DIRSYNC, true),
];

/// For mount(8), systemd or people; nothing for the file system.
fn is_ignored(opt: &str) -> bool {
    matches!(
        opt,
        "defaults"
            | "auto"
            | "noauto"
            | "nofail"
            | "user"
            | "nouser"
            | "users"
            | "owner"
            | "group"
            | "_netdev"
    ) || opt.starts_with("x-")
        || opt.starts_with("comment=")
}

/// `compress=`'s words: off or the codec.
pub fn parse_compress(v: &str) -> Result<Compress, String> {
    v.parse().map_err(|e| format!("compress={v}: {e}"))
}

fn number<T>(key: &str, v: &str, lo: T, hi: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + fmt::Display + Copy,
{
    let n: T = v
        .parse()
        .map_err(|_| format!("option '{key}={v}': not a number"))?;
    if n < lo || n > hi {
        return Err(format!("option '{key}={v}': must be {lo}..={hi}"));
    }
    Ok(n)
}

impl MountOpts {
    /// Parse `s`; with `sloppy` (mount's `-s`), unknown options are
    /// dropped with a warning instead of refused.
    pub fn parse(s: &str, sloppy: bool) -> Result<Self, String> {
        let mut o = MountOpts::default();
        // What a background server is given: all but what -s dropped.
        let mut kept: Vec<&str> = Vec::new();
        for opt in s.split(',') {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            match (key, value) {
                ("ro", None) => o.read_only = true,
                ("rw", None) => o.read_only = false,
                ("writeback_cache", None) => o.writeback_cache = true,
                ("no_writeback_cache", None) => o.writeback_cache = false,
                ("atomic_writes", None) => o.atomic_writes = true,
                ("no_atomic_writes", None) => o.atomic_writes = false,
                ("checkpoint", Some(v)) => o.checkpoint = Some(number(key, v, 1, u64::MAX)?),
                ("cache_size", Some(v)) => {
                    o.cache_size = Some(
                        crate::size::parse_size(v).map_err(|e| format!("option '{opt}': {e}"))?,
                    )
                }
                ("threads", Some(v)) => o.threads = Some(number(key, v, 1, 16)?),
                ("spin_us", Some(v)) => o.spin_us = Some(number(key, v, 0, 100_000)?),
                ("ring_spin_us", Some(v)) => o.ring_spin_us = Some(number(key, v, 0, 100_000)?),
                ("uring", Some(v)) => {
                    o.uring = Some(v.parse().map_err(|e| format!("option 'uring={v}': {e}"))?)
                }
                ("config", Some(v)) if !v.is_empty() => o.config = Some(PathBuf::from(v)),
                ("discard", Some(v)) => o.discard = Some(DiscardMode::parse(v)?),
                ("discard", None) => o.discard = Some(DiscardMode::On),
                ("nodiscard", None) => o.discard = Some(DiscardMode::Off),
                ("compress", Some(v)) => o.compress = Some(parse_compress(v)?),
                ("nocompress", None) => o.compress = Some(Compress::Off),
                ("object_wal" | "object_disk_cache", Some(v)) => {
                    let word = key == "object_wal"
                        && [crate::config::WAL_IN_STORE, crate::config::WAL_OFF].contains(&v);
                    if !v.starts_with('/') && !word {
                        return Err(format!(
                            "option '{opt}': must be an absolute path{}",
                            if key == "object_wal" {
                                ", store or off"
                            } else {
                                ""
                            }
                        ));
                    }
                    let p = Some(PathBuf::from(v));
                    if key == "object_wal" {
                        o.object_wal = p
                    } else {
                        o.object_disk_cache = p
                    }
                }
                ("object_wal_bytes" | "object_disk_cache_bytes", Some(v)) => {
                    let b = Some(
                        crate::size::parse_size(v).map_err(|e| format!("option '{opt}': {e}"))?,
                    );
                    if key == "object_wal_bytes" {
                        o.object_wal_bytes = b
                    } else {
                        o.object_disk_cache_bytes = b
                    }
                }
                ("reader_hold_secs", Some(v)) => {
                    o.reader_hold_secs =
                        Some(number(key, v, 0, lsfs_object::readers::MAX_HOLD_SECS)?)
                }
                ("reader_follow_secs", Some(v)) => {
                    o.reader_follow_secs =
                        Some(number(key, v, 0, lsfs_object::readers::MAX_HOLD_SECS)?)
                }
                ("allow_other", None) => o.allow_other = true,
                // The kernel always checks permissions against the
                // attributes lsfs reports.
                ("default_permissions", None) => {}
                ("", None) => {}
                _ if is_ignored(opt) => o.ignored.push(opt.to_string()),
                (name, None) if KERNEL_FLAGS.iter().any(|f| f.0 == name) => {
                    let &(_, flag, set) = KERNEL_FLAGS.iter().find(|f| f.0 == name).unwrap();
                    // The atime modes exclude each other.
                    if matches!(name, "noatime" | "relatime" | "strictatime") {
                        o.kernel_flags &=
                            !(libc::MS_NOATIME | libc::MS_RELATIME | libc::MS_STRICTATIME);
                    }
                    if set {
                        o.kernel_flags |= flag;
                    } else {
                        o.kernel_flags &= !(flag);
                    }
                }
                _ if sloppy => {
                    tracing::warn!("ignoring unknown mount option '{opt}' (-s)");
                    o.ignored.push(opt.to_string());
                    continue;
                }
                _ => return Err(format!("unknown mount option '{opt}' (known: {KNOWN})")),
            }
            kept.push(opt);
        }
        o.given = kept.join(",");
        Ok(o)
    }
}

impl FromStr for MountOpts {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        MountOpts::parse(s, false)
    }
}

impl fmt::Display for MountOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_cache_is_on_unless_turned_off() {
        let o: MountOpts = "".parse().unwrap();
        assert!(o.writeback_cache && !o.read_only);
        let o: MountOpts = "ro,no_writeback_cache".parse().unwrap();
        assert!(!o.writeback_cache && o.read_only);
        let o: MountOpts = "no_writeback_cache,writeback_cache,ro,rw".parse().unwrap();
        assert!(o.writeback_cache && !o.read_only, "later options win");
        assert_eq!(o.to_string(), "no_writeback_cache,writeback_cache,ro,rw");
        assert!(o.atomic_writes, "atomic writes are on by default");
        let o: MountOpts = "no_atomic_writes".parse().unwrap();
        assert!(!o.atomic_writes && o.writeback_cache);
        let e = "rw,nosuchthing".parse::<MountOpts>().unwrap_err();
        assert!(
            e.contains("'nosuchthing'") && e.contains("no_writeback_cache"),
            "{e}"
        );
    }

    #[test]
    fn object_wal_takes_an_absolute_path_and_a_size() {
        let o: MountOpts = "object_wal=/var/lib/a.wal,object_wal_bytes=8M"
            .parse()
            .unwrap();
        assert_eq!(o.object_wal, Some(PathBuf::from("/var/lib/a.wal")));
        assert_eq!(o.object_wal_bytes, Some(8 << 20));
        let e = "object_wal=a.wal".parse::<MountOpts>().unwrap_err();
        assert!(
            e.contains("'object_wal=a.wal'") && e.contains("absolute") && e.contains("store"),
            "{e}"
        );
        let o: MountOpts = "object_wal=store".parse().unwrap();
        assert_eq!(o.object_wal, Some(PathBuf::from("store")));
        let o: MountOpts = "object_wal=off".parse().unwrap();
        assert_eq!(o.object_wal, Some(PathBuf::from("off")));
        let e = "object_disk_cache=store".parse::<MountOpts>().unwrap_err();
        assert!(
            e.contains("absolute path") && !e.contains(", store or off"),
            "{e}"
        );
        let e = "object_wal_bytes=lots".parse::<MountOpts>().unwrap_err();
        assert!(e.contains("object_wal_bytes=lots"), "{e}");
    }

    #[test]
    fn fstab_bookkeeping_is_ignored() {
        let s = "defaults,noauto,auto,nofail,user,nouser,users,_netdev,\
                 x-systemd.automount,x-systemd.device-timeout=5,comment=backup disk";
        let o: MountOpts = s.parse().unwrap();
        assert_eq!(o.ignored.len(), 11, "{:?}", o.ignored);
        assert_eq!(o.kernel_flags, 0);
        assert!(!o.read_only && o.checkpoint.is_none());
    }

    #[test]
    fn lsfs_settings_as_key_value() {
        let o: MountOpts = "ro,checkpoint=42,cache_size=16M,threads=4,spin_us=0,ring_spin_us=500,config=/etc/l.toml"
            .parse()
            .unwrap();
        assert!(o.read_only);
        assert_eq!(o.checkpoint, Some(42));
        assert_eq!(o.cache_size, Some(16 << 20));
        assert_eq!(o.threads, Some(4));
        assert_eq!(o.spin_us, Some(0));
        assert_eq!(o.ring_spin_us, Some(500));
        assert_eq!(o.config, Some(PathBuf::from("/etc/l.toml")));
        assert_eq!(o.uring, None);
        let o: MountOpts = "uring=auto".parse().unwrap();
        assert_eq!(o.uring, Some(lsfs_fuse::UringMode::Auto));
        assert!("uring=yes"
            .parse::<MountOpts>()
            .unwrap_err()
            .contains("uring=yes"));
        for (bad, says) in [
            ("threads=17", "must be 1..=16"),
            ("threads=x", "not a number"),
            ("spin_us=100001", "must be 0..=100000"),
            ("checkpoint=0", "must be 1"),
            ("reader_hold_secs=86401", "must be 0..=86400"),
            ("reader_hold_secs=soon", "not a number"),
            ("reader_follow_secs=86401", "must be 0..=86400"),
            ("cache_size=4X", "unknown unit"),
            ("threads", "unknown mount option 'threads'"),
            ("ro=1", "unknown mount option 'ro=1'"),
        ] {
            let e = bad.parse::<MountOpts>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// `discard=MODE`, and ext4's `discard` and `nodiscard`; later wins.
    #[test]
    fn discard_modes() {
        let mode = |s: &str| s.parse::<MountOpts>().map(|o| o.discard);
        assert_eq!(mode("rw"), Ok(None));
        assert_eq!(mode("discard=batched"), Ok(Some(DiscardMode::Batched)));
        assert_eq!(mode("discard=off"), Ok(Some(DiscardMode::Off)));
        assert_eq!(mode("discard"), Ok(Some(DiscardMode::On)));
        assert_eq!(mode("discard,nodiscard"), Ok(Some(DiscardMode::Off)));
        let e = mode("discard=always").unwrap_err();
        assert!(e.contains("off, on, batched"), "{e}");
    }

    #[test]
    fn generic_flags_later_wins() {
        let o: MountOpts = "nosuid,nodev,noexec,suid".parse().unwrap();
        assert_eq!(o.kernel_flags, libc::MS_NODEV | libc::MS_NOEXEC);
        let o: MountOpts = "noatime,relatime".parse().unwrap();
        assert_eq!(o.kernel_flags, libc::MS_RELATIME);
        let o: MountOpts = "rw,dev,suid".parse().unwrap();
        assert_eq!(o.kernel_flags, 0, "mount.fuse3's additions for root");
    }

    #[test]
    fn sloppy_drops_unknown_options() {
        assert!(MountOpts::parse("rw,fsname=x", false).is_err());
        let o = MountOpts::parse("rw,fsname=x", true).unwrap();
        assert_eq!(o.ignored, ["fsname=x"]);
        assert_eq!(o.to_string(), "rw", "a background server would refuse it");
    }

    /// `compress=off|lz4|zstd|zstd:N` and `nocompress`; later wins, other words
    /// refused, naming the option and the valid words.
    #[test]
    fn compress_modes() {
        let mode = |s: &str| s.parse::<MountOpts>().map(|o| o.compress);
        assert_eq!(mode("rw"), Ok(None));
        assert_eq!(mode("compress=lz4"), Ok(Some(Compress::Lz4)));
        assert_eq!(mode("compress=on"), Ok(Some(Compress::Lz4)));
        assert_eq!(mode("compress=zstd"), Ok(Some(Compress::ZSTD)));
        assert_eq!(mode("compress=off"), Ok(Some(Compress::Off)));
        assert_eq!(mode("compress=zstd,nocompress"), Ok(Some(Compress::Off)));
        assert_eq!(mode("nocompress,compress=zstd"), Ok(Some(Compress::ZSTD)));
        assert_eq!(mode("compress=zstd:9"), Ok(Some(Compress::Zstd(9))));
        assert_eq!(mode("compress=zstd:3"), Ok(Some(Compress::ZSTD)));
        for bad in ["compress=zstd:0", "compress=zstd:20", "compress=zstd:x"] {
            let e = mode(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("1 to 19"), "{e}");
        }
        for bad in ["compress=gzip", "compress=", "compress=ZSTD"] {
            let e = mode(bad).unwrap_err();
            assert!(
                e.contains(bad) && e.contains("must be off, lz4, zstd or zstd:LEVEL"),
                "{e}"
            );
        }
    }
}
