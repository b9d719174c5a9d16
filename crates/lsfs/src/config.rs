//! Mount settings from a TOML file, with documented defaults and validated
//! ranges. Command-line options override the file.

use lsfs_core::fs::MountConfig;
use serde::Deserialize;
use std::path::PathBuf;

/// `lsfs.toml`. Every field is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Block cache size in bytes (default 64 MiB; 1 MiB..=64 GiB).
    pub cache_bytes: Option<u64>,
    /// Seconds between automatic checkpoints (default 5; 1..=3600).
    pub checkpoint_interval_secs: Option<u64>,
    /// Seconds plain checkpoints are kept (default 3600; 0..=31536000).
    pub protection_secs: Option<u64>,
    /// A checkpoint when the log since the last one fills 1/N of the
    /// segments (default 8; 0 = no such bound; 0..=1024).
    pub log_checkpoint_share: Option<u64>,
    /// Separate write streams for hot, cold and cleaned data (default true;
    /// used on file systems of at least 64 segments).
    pub streams: Option<bool>,
    /// What freed segments the device is told to drop by itself: "off",
    /// "on" (after each checkpoint) or "batched" (the default; see
    /// docs/CLEANER.md on discard). `-o discard=…` overrides it.
    pub discard: Option<lsfs_core::meta::discard::DiscardMode>,
    /// Compress records of user data: "off", "lz4", "zstd" or "zstd:N"
    /// (level 1 to 19, default 3; default: as the image says,
    /// docs/CONFIG.md). `-o compress=…` overrides it.
    pub compress: Option<String>,
    /// Serve FUSE requests through io_uring: "off" (the default), "auto"
    /// (when the kernel and privileges allow, else /dev/fuse) or "on"
    /// (else the mount fails). `--uring` and `-o uring=…` override it.
    pub uring: Option<UringSetting>,
    /// An object store's objects kept in memory, in bytes (default 64 MiB;
    /// 8 MiB..=64 GiB; docs/OBJECT_STORE.md). Image files ignore it.
    pub object_cache_bytes: Option<u64>,
    /// Segments a read-only mount of an object store fetches ahead, at
    /// once, while it reads segments in order (default 4; 0..=64).
    pub object_readahead_segments: Option<u64>,
    /// Where an object store's flush records wait for their segments to be
    /// uploaded: `store` (the default: small objects in the store itself),
    /// an absolute path on local disk (a write-ahead file), or `off` (every
    /// flush uploads the changed segment objects whole).
    /// `-o object_wal=…` and `LSFS_OBJECT_WAL` set it too.
    pub object_wal: Option<PathBuf>,
    /// Its bound in bytes (default 64 MiB; 1 MiB..=64 GiB).
    pub object_wal_bytes: Option<u64>,
    /// An object store's cache of segment objects on local disk: a
    /// directory, absolute (default none). `-o object_disk_cache=DIR` and
    /// `LSFS_OBJECT_DISK_CACHE` set it too.
    pub object_disk_cache: Option<PathBuf>,
    /// Its bound in bytes (default 1 GiB; 16 MiB..=16 TiB).
    pub object_disk_cache_bytes: Option<u64>,
    /// Seconds a read-only mount of a checkpoint on an object store holds
    /// it between renewals; the writer keeps held checkpoints (default
    /// 120; 0 = no holds, and a writer honours none; 0..=86400;
    /// docs/OBJECT_STORE.md). `-o reader_hold_secs=N` overrides it.
    pub reader_hold_secs: Option<u64>,
    /// Seconds between a reader's looks for a newer checkpoint, when it
    /// shows the newest one of an object store a writer holds (no
    /// `--checkpoint`): it then moves on to it (default 10; 0 = it stays on
    /// the checkpoint it mounted; 0..=86400; docs/OBJECT_STORE.md).
    /// `-o reader_follow_secs=N` overrides it.
    pub reader_follow_secs: Option<u64>,
    /// The cleaner (see lsfs_core::gc::CleanerConfig for every key, default and range).
    #[serde(default)]
    pub cleaner: lsfs_core::gc::CleanerConfig,
}

/// `uring` as the file spells it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UringSetting {
    Off,
    Auto,
    On,
}

impl From<UringSetting> for lsfs_fuse::UringMode {
    fn from(s: UringSetting) -> Self {
        match s {
            UringSetting::Off => lsfs_fuse::UringMode::Off,
            UringSetting::Auto => lsfs_fuse::UringMode::Auto,
            UringSetting::On => lsfs_fuse::UringMode::On,
        }
    }
}

pub const CACHE_BYTES_DEFAULT: u64 = 64 << 20;

/// Default of `reader_follow_secs`: the writer's own round
/// (`lsfs_object::readers::WRITER_ROUND_SECS`), so a reader is about as far
/// behind as the writer is in seeing its hold. Each look reads the store's
/// two superblock objects.
pub const DEFAULT_READER_FOLLOW_SECS: u64 = 10;

/// `object_wal`'s word for keeping flush records in the store itself
/// (the default).
pub const WAL_IN_STORE: &str = "store";
/// `object_wal`'s word for no records: every flush uploads the changed
/// segment objects whole.
pub const WAL_OFF: &str = "off";

/// A local path setting `name` and its bound `name_bytes`: from a mount
/// option, else this file, else the environment (`env`, `env_BYTES`).
/// The path must be absolute (or, for `object_wal`, the word `store` or
/// `off`); a bound without a path is refused, unless there is a default
/// path (`default_path`).
fn path_and_bound(
    (name, env): (&str, &str),
    (opt_path, file_path): (Option<PathBuf>, &Option<PathBuf>),
    (opt_bytes, file_bytes): (Option<u64>, Option<u64>),
    (default, lo, hi): (u64, u64, u64),
    default_path: Option<&str>,
) -> Result<Option<(PathBuf, u64)>, String> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
    let env_bytes = format!("{env}_BYTES");
    let (from, path) = match (opt_path, file_path, var(env)) {
        (Some(p), _, _) => (name.to_string(), p),
        (None, Some(p), _) => (name.to_string(), p.clone()),
        (None, None, Some(p)) => (env.to_string(), p.into()),
        (None, None, None) if default_path.is_some() => {
            (name.to_string(), default_path.expect("some").into())
        }
        (None, None, None) => {
            if let Some(b) = opt_bytes.or(file_bytes) {
                return Err(format!(
                    "{name}_bytes = {b} without {name}: name the {name} too"
                ));
            }
            return Ok(None);
        }
    };
    let word = name == "object_wal"
        && [WAL_IN_STORE, WAL_OFF]
            .iter()
            .any(|w| path == std::path::Path::new(w));
    if !path.is_absolute() && !word {
        return Err(format!(
            "{from} = {:?}: must be an absolute path{}",
            path.display(),
            if name == "object_wal" {
                " or \"store\" or \"off\""
            } else {
                ""
            }
        ));
    }
    let bytes = match (opt_bytes.or(file_bytes), var(&env_bytes)) {
        (Some(b), _) => b,
        (None, Some(v)) => crate::size::parse_size(&v.to_string_lossy())
            .map_err(|e| format!("{env_bytes}={v:?}: {e}"))?,
        (None, None) => default,
    };
    let bytes = check(&format!("{name}_bytes"), bytes, lo, hi, "bytes")?;
    Ok(Some((path, bytes)))
}

fn check(name: &str, v: u64, lo: u64, hi: u64, unit: &str) -> Result<u64, String> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{name} = {v} {unit} is outside its valid range {lo}..={hi} {unit}"
        ))
    }
}

impl FileConfig {
    pub fn load(path: &std::path::Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The segments a read-only mount of an object store fetches ahead,
    /// validated.
    pub fn object_readahead_segments(&self) -> Result<u64, String> {
        check(
            "object_readahead_segments",
            self.object_readahead_segments
                .unwrap_or(lsfs_object::device::DEFAULT_READAHEAD_SEGMENTS),
            0,
            64,
            "segments",
        )
    }

    /// The bound on an object store's objects kept in memory, validated.
    pub fn object_cache_bytes(&self) -> Result<u64, String> {
        check(
            "object_cache_bytes",
            self.object_cache_bytes
                .unwrap_or(lsfs_object::device::DEFAULT_CACHE_BYTES),
            8 << 20,
            64 << 30,
            "bytes",
        )
    }

    /// How long readers' holds last (`reader_hold_secs`; 0: no holds): the
    /// mount option wins over this file. Validated.
    pub fn reader_hold_secs(&self, option: Option<u64>) -> Result<u64, String> {
        check(
            "reader_hold_secs",
            option
                .or(self.reader_hold_secs)
                .unwrap_or(lsfs_object::readers::DEFAULT_HOLD_SECS),
            0,
            lsfs_object::readers::MAX_HOLD_SECS,
            "s",
        )
    }

    /// How often a reader of the newest checkpoint looks for a newer one
    /// (`reader_follow_secs`; 0: never): the mount option wins over this
    /// file. Validated.
    pub fn reader_follow_secs(&self, option: Option<u64>) -> Result<u64, String> {
        check(
            "reader_follow_secs",
            option
                .or(self.reader_follow_secs)
                .unwrap_or(DEFAULT_READER_FOLLOW_SECS),
            0,
            lsfs_object::readers::MAX_HOLD_SECS,
            "s",
        )
    }

    /// Where an object store's flush records wait, for a mount of `image`:
    /// a mount option (`path`, `bytes`) wins over this file, which wins over
    /// `LSFS_OBJECT_WAL` and `LSFS_OBJECT_WAL_BYTES`; with none of them, in
    /// the store (`object_wal = "store"`) for an object store, and nowhere
    /// for an image file. `None` for `off`.
    pub fn object_wal(
        &self,
        path: Option<PathBuf>,
        bytes: Option<u64>,
        object_store: bool,
    ) -> Result<Option<lsfs_object::WalConfig>, String> {
        let got = path_and_bound(
            ("object_wal", "LSFS_OBJECT_WAL"),
            (path, &self.object_wal),
            (bytes, self.object_wal_bytes),
            (lsfs_object::wal::DEFAULT_WAL_BYTES, 1 << 20, 64 << 30),
            object_store.then_some(WAL_IN_STORE),
        )?;
        let got = got.filter(|(p, _)| p != std::path::Path::new(WAL_OFF));
        Ok(got.map(|(path, max_bytes)| lsfs_object::WalConfig {
            place: if path == std::path::Path::new(WAL_IN_STORE) {
                lsfs_object::WalPlace::Store
            } else {
                lsfs_object::WalPlace::File(path)
            },
            max_bytes,
        }))
    }

    /// The cache of segment objects on local disk, if one is asked for;
    /// sources as for [`FileConfig::object_wal`].
    pub fn object_disk_cache(
        &self,
        dir: Option<PathBuf>,
        bytes: Option<u64>,
    ) -> Result<Option<lsfs_object::DiskCacheConfig>, String> {
        let got = path_and_bound(
            ("object_disk_cache", "LSFS_OBJECT_DISK_CACHE"),
            (dir, &self.object_disk_cache),
            (bytes, self.object_disk_cache_bytes),
            (
                lsfs_object::disk_cache::DEFAULT_DISK_CACHE_BYTES,
                16 << 20,
                16 << 40,
            ),
            None,
        )?;
        Ok(got.map(|(dir, max_bytes)| lsfs_object::DiskCacheConfig { dir, max_bytes }))
    }

    /// The mount configuration, validating every value.
    pub fn mount_config(
        &self,
        cache_override: Option<u64>,
        read_only: bool,
        checkpoint: Option<u64>,
    ) -> Result<MountConfig, String> {
        let mut c = MountConfig::default();
        self.object_cache_bytes()?;
        self.object_readahead_segments()?;
        self.reader_hold_secs(None)?;
        self.reader_follow_secs(None)?;
        let cache = check(
            "cache size",
            cache_override
                .or(self.cache_bytes)
                .unwrap_or(CACHE_BYTES_DEFAULT),
            1 << 20,
            64 << 30,
            "bytes",
        )?;
        c.store.cache_blocks = (cache / 4096) as usize;
        c.checkpoint_interval_secs = check(
            "checkpoint_interval_secs",
            self.checkpoint_interval_secs.unwrap_or(5),
            1,
            3600,
            "s",
        )?;
        c.store.protection_secs = check(
            "protection_secs",
            self.protection_secs.unwrap_or(3600),
            0,
            31_536_000,
            "s",
        )?;
        c.store.log_checkpoint_share = check(
            "log_checkpoint_share",
            self.log_checkpoint_share
                .unwrap_or(lsfs_core::meta::store::LOG_CHECKPOINT_SHARE),
            0,
            1024,
            "",
        )?;
        c.store.streams = self.streams.unwrap_or(true);
        c.store.discard = self.discard.unwrap_or_default();
        if let Some(v) = &self.compress {
            let mode = v.parse().map_err(|e| format!("compress = {v:?}: {e}"))?;
            c.store.compress = Some(mode);
        }
        c.store.read_only = read_only || checkpoint.is_some();
        c.checkpoint = checkpoint;
        self.cleaner.validate()?;
        c.cleaner = self.cleaner.clone();
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings with a few valid words are enums: a wrong word is refused
    /// at parse time, naming the setting, its line and the valid words.
    #[test]
    fn word_settings_name_their_valid_values() {
        let f: FileConfig =
            toml::from_str("[cleaner]\npower = \"battery\"\nthreaded_logging = \"adaptive\"")
                .unwrap();
        assert_eq!(f.cleaner.power, lsfs_core::gc::PowerMode::Battery);
        assert_eq!(
            f.cleaner.threaded_logging,
            lsfs_core::gc::ThreadedLogging::Adaptive
        );
        let f: FileConfig = toml::from_str("[cleaner]\npolicy = \"greedy\"").unwrap();
        assert_eq!(f.cleaner.policy, lsfs_core::gc::PolicyKind::Greedy);
        for (key, valid) in [
            ("policy", "timestamp, greedy, cost-benefit"),
            ("power", "`auto`, `ac`"),
            ("threaded_logging", "`off`, `adaptive`"),
        ] {
            let err = toml::from_str::<FileConfig>(&format!("[cleaner]\n{key} = \"solar\""))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(valid), "{err}");
        }
    }

    /// `compress` is checked when the mount's settings are made, naming
    /// the setting and its valid words.
    #[test]
    fn compress_is_read_by_name() {
        use lsfs_core::meta::store::Compress;
        let mode = |toml_text: &str| {
            toml::from_str::<FileConfig>(toml_text)
                .unwrap()
                .mount_config(None, false, None)
                .map(|c| c.store.compress)
        };
        assert_eq!(mode(""), Ok(None));
        assert_eq!(mode("compress = \"zstd\""), Ok(Some(Compress::ZSTD)));
        assert_eq!(mode("compress = \"lz4\""), Ok(Some(Compress::Lz4)));
        assert_eq!(mode("compress = \"off\""), Ok(Some(Compress::Off)));
        assert_eq!(mode("compress = \"zstd:7\""), Ok(Some(Compress::Zstd(7))));
        let e = mode("compress = \"zstd:23\"").unwrap_err();
        assert!(e.contains("zstd:23") && e.contains("1 to 19"), "{e}");
        let e = mode("compress = \"brotli\"").unwrap_err();
        assert!(
            e.contains("compress = \"brotli\"") && e.contains("off, lz4, zstd or zstd:LEVEL"),
            "{e}"
        );
    }

    #[test]
    fn uring_is_read_by_name() {
        let f: FileConfig = toml::from_str("uring = \"auto\"").unwrap();
        assert_eq!(f.uring, Some(UringSetting::Auto));
        assert!(toml::from_str::<FileConfig>("uring = \"yes\"").is_err());
    }

    /// `discard` is a word too: batched unless the file says otherwise.
    #[test]
    fn discard_is_read_by_name() {
        use lsfs_core::meta::discard::DiscardMode;
        let none = FileConfig::default()
            .mount_config(None, false, None)
            .unwrap();
        assert_eq!(none.store.discard, DiscardMode::Batched);
        let f: FileConfig = toml::from_str("discard = \"on\"").unwrap();
        let c = f.mount_config(None, false, None).unwrap();
        assert_eq!(c.store.discard, DiscardMode::On);
        let err = toml::from_str::<FileConfig>("discard = \"sometimes\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`off`, `on`, `batched`"), "{err}");
    }

    /// The write-ahead file: an absolute path, a bound in range, a bound
    /// alone refused; the mount option wins over the file.
    #[test]
    fn object_wal_is_checked_and_named() {
        use lsfs_object::WalPlace;
        let none = FileConfig::default();
        if std::env::var_os("LSFS_OBJECT_WAL").is_none() {
            assert_eq!(none.object_wal(None, None, false).unwrap(), None);
            // An object store keeps its records in the store by default,
            // and `off` turns them off.
            let w = none.object_wal(None, Some(2 << 20), true).unwrap().unwrap();
            assert_eq!((w.place, w.max_bytes), (WalPlace::Store, 2 << 20));
            assert_eq!(
                none.object_wal(Some("off".into()), None, true).unwrap(),
                None
            );
        }
        let f: FileConfig = toml::from_str("object_wal = \"/var/lib/x.wal\"").unwrap();
        let w = f.object_wal(None, None, true).unwrap().unwrap();
        assert_eq!(w.place, WalPlace::File("/var/lib/x.wal".into()));
        assert_eq!(w.max_bytes, lsfs_object::wal::DEFAULT_WAL_BYTES);
        let w = f
            .object_wal(Some("/o.wal".into()), Some(2 << 20), true)
            .unwrap()
            .unwrap();
        assert_eq!(
            (w.place, w.max_bytes),
            (WalPlace::File("/o.wal".into()), 2 << 20)
        );
        // The word "store": records kept in the store itself.
        let s: FileConfig = toml::from_str("object_wal = \"store\"").unwrap();
        assert_eq!(
            s.object_wal(None, None, true).unwrap().unwrap().place,
            WalPlace::Store
        );
        let w = f
            .object_wal(Some("store".into()), None, true)
            .unwrap()
            .unwrap();
        assert_eq!(w.place, WalPlace::Store, "the mount option wins");
        let err = f.object_wal(None, Some(1000), true).unwrap_err();
        assert!(
            err.contains("object_wal_bytes") && err.contains("1048576"),
            "{err}"
        );
        let rel: FileConfig = toml::from_str("object_wal = \"x.wal\"").unwrap();
        let err = rel.object_wal(None, None, true).unwrap_err();
        assert!(
            err.contains("object_wal")
                && err.contains("absolute")
                && err.contains("store")
                && err.contains("off"),
            "{err}"
        );
        let d: FileConfig = toml::from_str(
            "object_disk_cache = \"/var/cache/lsfs\"\nobject_disk_cache_bytes = 1000",
        )
        .unwrap();
        let err = d.object_disk_cache(None, None).unwrap_err();
        assert!(err.contains("object_disk_cache_bytes"), "{err}");
        let c = d.object_disk_cache(None, Some(64 << 20)).unwrap().unwrap();
        assert_eq!(c.max_bytes, 64 << 20);
        let alone: FileConfig = toml::from_str("object_wal_bytes = 2097152").unwrap();
        if std::env::var_os("LSFS_OBJECT_WAL").is_none() {
            let err = alone.object_wal(None, None, false).unwrap_err();
            assert!(err.contains("without object_wal"), "{err}");
        }
    }

    #[test]
    fn reader_follow_secs_is_checked_and_named() {
        let none = FileConfig::default();
        assert_eq!(
            none.reader_follow_secs(None),
            Ok(DEFAULT_READER_FOLLOW_SECS)
        );
        assert_eq!(none.reader_follow_secs(Some(0)), Ok(0));
        let f: FileConfig = toml::from_str("reader_follow_secs = 3").unwrap();
        assert_eq!(f.reader_follow_secs(None), Ok(3));
        assert_eq!(f.reader_follow_secs(Some(60)), Ok(60), "the option wins");
        let big: FileConfig = toml::from_str("reader_follow_secs = 100000").unwrap();
        let err = big.reader_follow_secs(None).unwrap_err();
        assert!(
            err.contains("reader_follow_secs") && err.contains("0..=86400"),
            "{err}"
        );
    }

    #[test]
    fn reader_hold_secs_is_checked_and_named() {
        let none = FileConfig::default();
        assert_eq!(none.reader_hold_secs(None), Ok(120));
        assert_eq!(none.reader_hold_secs(Some(0)), Ok(0));
        let f: FileConfig = toml::from_str("reader_hold_secs = 30").unwrap();
        assert_eq!(f.reader_hold_secs(None), Ok(30));
        assert_eq!(f.reader_hold_secs(Some(60)), Ok(60), "the option wins");
        let big: FileConfig = toml::from_str("reader_hold_secs = 100000").unwrap();
        let err = big.reader_hold_secs(None).unwrap_err();
        assert!(
            err.contains("reader_hold_secs") && err.contains("0..=86400"),
            "{err}"
        );
        // Checked with the rest at mount, also where it would not be used.
        assert!(big.mount_config(None, false, None).is_err());
    }

    #[test]
    fn ranges_are_enforced_and_named() {
        let f: FileConfig = toml::from_str("object_readahead_segments = 65").unwrap();
        let err = f.mount_config(None, false, None).unwrap_err();
        assert!(
            err.contains("object_readahead_segments") && err.contains("0..=64"),
            "{err}"
        );
        let f: FileConfig = toml::from_str("checkpoint_interval_secs = 0").unwrap();
        let err = f.mount_config(None, false, None).unwrap_err();
        assert!(
            err.contains("checkpoint_interval_secs") && err.contains("1..=3600"),
            "{err}"
        );
        assert!(
            toml::from_str::<FileConfig>("bogus = 1").is_err(),
            "unknown keys must be refused"
        );
        let ok: FileConfig = toml::from_str("cache_bytes = 16777216\nprotection_secs = 0").unwrap();
        let c = ok.mount_config(None, false, None).unwrap();
        assert_eq!(c.store.cache_blocks, 4096);
        assert_eq!(c.store.protection_secs, 0);
    }
}
