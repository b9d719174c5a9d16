//! `lsfs`: make, mount, check, inspect and control lsfs file systems.
//! Set the log level with `LSFS_LOG` (e.g. `LSFS_LOG=debug`).

mod config;
mod control;
mod defrag_cmd;
mod device_target;
mod gc_cmd;
mod inspect_cmd;
mod man_pages;
mod migrate_cmd;
mod mount_helper;
mod mount_opts;
mod power;
mod reader_follow;
mod size;
mod stats_text;

use clap::{Args, CommandFactory, Parser, Subcommand};
use config::FileConfig;
use lsfs_core::device::{BlockDevice, FileDevice};
use lsfs_core::fs::{Lsfs, MountConfig};
use lsfs_core::meta::open::MkfsOptions;
use lsfs_core::meta::store::Compress;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Parser)]
#[command(
    name = "lsfs",
    version,
    about = "A log-structured file system with continuous checkpoints and snapshots"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Make an image (if there is none) and mount it in the foreground; Ctrl-C unmounts.
    Run(RunArgs),
    /// Make a new file system on an image file, a block device or an object store.
    Mkfs(MkfsArgs),
    /// Mount a file system (foreground unless --background).
    ///
    /// mount(8) runs lsfs too: `mount -t fuse.lsfs IMAGE DIR -o OPTIONS`,
    /// or a line `IMAGE DIR fuse.lsfs OPTIONS 0 0` in /etc/fstab, mounts as
    /// --background does and returns once mounted (scripts/install.sh puts
    /// lsfs in /usr/local/bin and links /sbin/mount.fuse.lsfs to it).
    Mount(MountArgs),
    /// List, take, promote, demote or delete checkpoints and snapshots.
    Checkpoint(CpArgs),
    /// Take a snapshot (a checkpoint that is kept until demoted).
    Snapshot(SnapArgs),
    /// Counters of a mounted file system: flushes, records, cache, segments.
    Stats(StatsArgs),
    /// The cleaner of a mounted file system.
    Gc(GcArgs),
    /// Discard the free space (as fstrim does on the mount): holes punched
    /// in an image file, BLKDISCARD on a block device.
    Trim(TrimArgs),
    /// Lay fragmented files out again in file order, online (a file, a
    /// directory tree, or the mount point for everything).
    Defrag(defrag_cmd::DefragArgs),
    /// Simulators: cleaning policies, caches, FTLs, workloads (see docs/REPRODUCTION.md).
    #[command(subcommand)]
    Sim(lsfs_sim::cli::SimCommand),
    /// Check an unmounted image (exit 0 clean, 4 errors left, 8 could not check).
    Fsck(FsckArgs),
    /// Show an unmounted image's superblocks, segments, checkpoints or log records.
    Inspect(InspectArgs),
    /// Copy an unmounted file system to another device: an image file into
    /// an object store or back, block for block, then check the copy.
    Migrate(migrate_cmd::MigrateArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the lsfs(1) man page, or write one page per subcommand into --out.
    Man {
        /// A directory to write lsfs.1, lsfs-mount.1, … into (created if missing).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Args)]
struct GcArgs {
    #[command(subcommand)]
    action: GcAction,
    /// The mount point.
    #[arg(long, global = true)]
    mount: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum GcAction {
    /// Whether it runs, its policy, free space and the last pass.
    Status,
    /// Run one pass now.
    Run {
        /// Victim segments (1..=256).
        #[arg(long, default_value_t = 2)]
        segments: u64,
    },
    /// Totals: passes, copies, write amplification, utilization histogram.
    Stats,
    /// Start background cleaning.
    Start,
    /// Stop background cleaning (foreground cleaning before ENOSPC stays).
    Stop,
    /// Change the selection policy (timestamp, greedy, cost-benefit, cost-hotness, balanced).
    Policy {
        /// The policy's name.
        name: String,
    },
    /// Switch threaded logging: off, adaptive or always (docs/CLEANER.md §5).
    Threaded {
        /// The mode.
        mode: String,
    },
    /// Write an SVG of the utilization histogram and write amplification over time.
    Plot {
        /// The SVG file to write.
        #[arg(long, default_value = "gc.svg")]
        out: PathBuf,
    },
}

#[derive(Args)]
struct FsckArgs {
    /// The unmounted image file or block device, or an object store URL
    /// (s3://BUCKET/PREFIX, file:///DIR).
    image: PathBuf,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InspectArgs {
    #[command(subcommand)]
    what: InspectWhat,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum InspectWhat {
    /// Both superblock copies.
    Superblock {
        /// The unmounted image file or block device, or an object store URL.
        image: PathBuf,
    },
    /// The segment usage table (like NILFS's lssu).
    Segments {
        /// The unmounted image file or block device, or an object store URL.
        image: PathBuf,
        /// Include free segments.
        #[arg(long)]
        all: bool,
    },
    /// The checkpoints and snapshots (like lscp).
    Checkpoints {
        /// The unmounted image file or block device, or an object store URL.
        image: PathBuf,
    },
    /// The log records of one segment with their summaries (like dumpseg).
    DumpSegment {
        /// The unmounted image file or block device, or an object store URL.
        image: PathBuf,
        /// Segment number (0 .. segments − 1).
        segno: u64,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Image file (created if missing).
    #[arg(long, default_value = "lsfs.img")]
    image: PathBuf,
    /// Size of a new image.
    #[arg(long, default_value = "4G", value_parser = size::parse_size)]
    size: u64,
    /// Where to mount it (created if missing).
    #[arg(long, default_value = "mnt")]
    mountpoint: PathBuf,
}

#[derive(Args)]
struct MkfsArgs {
    /// Image file or block device, or an object store URL
    /// (s3://BUCKET/PREFIX, file:///DIR; needs --size).
    image: PathBuf,
    /// Create (or resize) the image file to this size.
    #[arg(long, value_parser = size::parse_size)]
    size: Option<u64>,
    /// Segment size: a power of two from 256K to 256M.
    #[arg(long, default_value = "2M", value_parser = size::parse_size)]
    segment_size: u64,
    /// A label of at most 64 bytes.
    #[arg(long, default_value = "")]
    label: String,
    /// Compress records of user data: off, lz4, zstd or zstd:N. "lz4"
    /// marks the image with the compressed-records feature from the
    /// start, "zstd" with the zstd-frames feature too (builds without it
    /// refuse it). The image keeps the codec, not a zstd level: that is
    /// each mount's (`-o compress=zstd:N`).
    #[arg(long, value_parser = clap::builder::ValueParser::new(|v: &str| v.parse::<Compress>()))]
    compress: Option<Compress>,
    /// Overwrite an existing lsfs image.
    #[arg(long)]
    force: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MountArgs {
    /// The image file or block device, or an object store URL
    /// (s3://BUCKET/PREFIX, file:///DIR): one read-write mount at a time.
    image: PathBuf,
    /// An existing directory to mount it on.
    mountpoint: PathBuf,
    /// Mount this checkpoint or snapshot read-only. A read-only mount of an
    /// object store without it shows, while a writer holds the store, the
    /// writer's newest checkpoint (held as this one would be), and moves on
    /// to each newer one it finds (`reader_follow_secs`).
    #[arg(long)]
    checkpoint: Option<u64>,
    /// Mount options, comma-separated: `ro`, `rw`, `writeback_cache` (the
    /// default: the kernel buffers writes and sends them in batches; fsync,
    /// close, snapshots and unmount send everything first, and write errors
    /// come back from fsync and close), `no_writeback_cache` (every
    /// write() reaches lsfs before it returns), `no_atomic_writes` (F2FS's
    /// atomic-write ioctls answer ENOTTY, as on a file system without
    /// them; `atomic_writes`, the default, serves them); the flags below as
    /// `checkpoint=N`, `cache_size=SIZE`, `threads=N`, `spin_us=N`,
    /// `ring_spin_us=N`,
    /// `config=FILE` (a flag given too must agree); `discard=off|on|batched`
    /// (what freed space is given back to the device by itself; `discard`
    /// is `on`, `nodiscard` is `off`; default batched, or the config
    /// file's); `compress=off|lz4|zstd|zstd:N` (records of user data written as
    /// LZ4 or zstd frames, zstd at level N, 1 to 19, default 3; `nocompress` is `off`; default: as the image
    /// says, or the config file); `object_wal=PATH` (an object store's flushes go to
    /// this local write-ahead file and its objects are uploaded later:
    /// docs/OBJECT_STORE.md; `object_wal=store` keeps each flush as a small
    /// object in the store itself instead) and `object_wal_bytes=SIZE` (its bound,
    /// default 64M); `object_disk_cache=DIR` and `object_disk_cache_bytes=SIZE`
    /// (an object store's segments cached on local disk, default bound
    /// 1G); `reader_hold_secs=N` (how long a read-only mount of a
    /// checkpoint on an object store holds it between renewals, so the
    /// writer keeps it; default 120, 0..=86400, 0 for no holds);
    /// `reader_follow_secs=N` (how often a read-only mount of an object
    /// store's newest checkpoint looks for a newer one and moves on to it;
    /// default 10, 0..=86400, 0 to stay); the generic `nosuid`,
    /// `nodev`, `noexec`, `noatime`, `sync`, … and their opposites; and,
    /// ignored, what fstab says to mount(8) or systemd (`defaults`,
    /// `noauto`, `nofail`, `user`, `_netdev`, `x-*`, `comment=*`).
    #[arg(short = 'o')]
    options: Option<mount_opts::MountOpts>,
    /// Threads serving FUSE requests (1..=16; default 1). They take turns
    /// on the file system's lock; see docs/PERFORMANCE.md for what a second
    /// one gives.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=16))]
    threads: Option<u16>,
    /// Microseconds the FUSE server keeps polling for the next request
    /// after one (0..=100000; default 1000; 0 never polls). Polling saves a
    /// cross-CPU wake-up per request while requests come fast and costs up
    /// to one CPU meanwhile; never on battery power, nor while other
    /// threads wait for a CPU (the kernel's CPU pressure: off for 0.1 s,
    /// doubling up to 1.6 s while it lasts). See docs/PERFORMANCE.md.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    spin_us: Option<u32>,
    /// Serve FUSE requests through io_uring (Linux 6.14+, root): off (the
    /// default), auto (when possible, else /dev/fuse; the log says which)
    /// or on (else the mount fails). Turns on the kernel's
    /// `enable_uring` switch if needed. See docs/PERFORMANCE.md.
    #[arg(long)]
    uring: Option<lsfs_fuse::UringMode>,
    /// With --uring: microseconds each ring queue thread keeps polling for
    /// the next request after one (0..=100000; default 1000; 0 never
    /// polls). By the same rules as --spin-us: never on battery power, nor
    /// while other threads wait for a CPU. See docs/PERFORMANCE.md.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    ring_spin_us: Option<u32>,
    /// Block cache size (1M..=64G).
    #[arg(long, value_parser = size::parse_size)]
    cache_size: Option<u64>,
    /// A TOML file with mount settings (see docs/CONFIG.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Return once mounted, serving from a background process.
    #[arg(long)]
    background: bool,
    /// Set by `--background` for the serving process: the command that
    /// started it says where the mount is, and Ctrl-C does not reach it.
    #[arg(long, hide = true)]
    served_in_background: bool,
    /// Called as mount(8)'s helper: say nothing once mounted, as mount does.
    #[arg(skip)]
    quiet: bool,
}

#[derive(Args)]
struct Target {
    /// A mounted file system (its mount point).
    #[arg(long, global = true, conflicts_with = "image")]
    mount: Option<PathBuf>,
    /// An unmounted image, or an object store URL (s3://BUCKET/PREFIX, file:///DIR).
    #[arg(long, global = true)]
    image: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Args)]
struct CpArgs {
    #[command(subcommand)]
    action: CpAction,
    #[command(flatten)]
    target: Target,
}

#[derive(Subcommand)]
enum CpAction {
    /// Every checkpoint and snapshot.
    List,
    /// Take a checkpoint now.
    Create,
    /// Delete a plain checkpoint (not a snapshot, not the latest one).
    Delete {
        /// Checkpoint number.
        cno: u64,
    },
    /// Make a checkpoint a snapshot.
    Promote {
        /// Checkpoint number.
        cno: u64,
    },
    /// Make a snapshot a plain checkpoint again: it stays listed here (and
    /// mountable) until it is older than the protection period, then goes.
    Demote {
        /// Snapshot's checkpoint number.
        cno: u64,
    },
}

#[derive(Args)]
struct SnapArgs {
    #[command(subcommand)]
    action: SnapAction,
    #[command(flatten)]
    target: Target,
}

#[derive(Subcommand)]
enum SnapAction {
    /// The snapshots.
    List,
    /// Take a snapshot now.
    Create,
    /// Delete a snapshot and its checkpoint: it leaves `snapshot list` and
    /// `checkpoint list`, and the blocks only it held become reclaimable.
    /// With --keep-checkpoint it is only demoted to a plain checkpoint.
    Delete {
        /// Snapshot's checkpoint number.
        cno: u64,
        /// Only demote it: it stays in `checkpoint list` (and mountable
        /// with --checkpoint) until it is older than the protection period.
        #[arg(long)]
        keep_checkpoint: bool,
    },
}

#[derive(Args)]
struct TrimArgs {
    /// Where on the device to start (bytes, or with a unit: 64M, 1G).
    #[arg(long, default_value = "0", value_parser = size::parse_size)]
    offset: u64,
    /// How much of the device to look at (default: all of it).
    #[arg(long, value_parser = size::parse_size)]
    length: Option<u64>,
    /// Leave free runs shorter than this.
    #[arg(long, default_value = "0", value_parser = size::parse_size)]
    minimum: u64,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
struct StatsArgs {
    /// The mount point of a mounted lsfs.
    #[arg(long)]
    mount: PathBuf,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One glibc malloc arena for the server. With one per thread, blocks the
/// FUSE thread frees stay in its arena while the ticker's and the control
/// socket's arenas grow for their own passes and checkpoints: measured on
/// `scripts/fsx-soak.sh 300000 2 100000`, peak RSS 130 MiB with per-thread
/// arenas (three of 31–49 MiB each, a 5 MiB main heap) against 85 MiB with
/// one, and no slower (253 s against 293 s). The engine runs under one mutex,
/// so the threads never allocated in parallel anyway.
fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LSFS_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // clap adds `help` only when it builds the command.
    let subcommands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .chain(["help".to_string()])
        .collect();
    let subcommands: Vec<&str> = subcommands.iter().map(String::as_str).collect();
    if mount_helper::is_helper_call(&argv, &subcommands) {
        return mount_helper_main(&argv[1..]);
    }
    let cli = Cli::parse_from(argv);
    if !matches!(cli.cmd, Cmd::Run(_) | Cmd::Mount(_)) {
        // Reporting commands end quietly when their reader goes away
        // (`lsfs gc stats | head`), as other tools do, instead of panicking
        // on EPIPE. Not the file system server: a control-socket client
        // that hangs up must not kill the mount.
        // SAFETY: restores the default disposition of one signal before
        // any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if matches!(cli.cmd, Cmd::Run(_) | Cmd::Mount(_)) {
        one_malloc_arena();
    }
    let r = match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::Mkfs(a) => mkfs(a),
        Cmd::Mount(a) => mount(a),
        Cmd::Checkpoint(a) => checkpoint_cmd(a),
        Cmd::Snapshot(a) => snapshot_cmd(a),
        Cmd::Stats(a) => stats_cmd(a),
        Cmd::Gc(a) => gc(a),
        Cmd::Trim(a) => trim_cmd(a),
        Cmd::Defrag(a) => defrag_cmd::run(a),
        Cmd::Migrate(a) => migrate_cmd::run(a),
        Cmd::Sim(c) => lsfs_sim::cli::run(c).map_err(|e| e.to_string()),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "lsfs", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { out } => man_pages::write(Cli::command(), out.as_deref()),
        Cmd::Fsck(a) => match inspect_cmd::fsck(&a.image, a.json) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e),
        },
        Cmd::Inspect(a) => {
            let json = a.json;
            let (image, what) = match a.what {
                InspectWhat::Superblock { image } => (image, inspect_cmd::What::Superblock),
                InspectWhat::Segments { image, all } => {
                    (image, inspect_cmd::What::Segments { all })
                }
                InspectWhat::Checkpoints { image } => (image, inspect_cmd::What::Checkpoints),
                InspectWhat::DumpSegment { image, segno } => {
                    (image, inspect_cmd::What::DumpSegment(segno))
                }
            };
            inspect_cmd::inspect(&image, what, json)
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("lsfs: {msg}");
            ExitCode::from(1)
        }
    }
}

/// `lsfs` run by mount(8) or mount.fuse3 (see mount_helper.rs): mount in
/// the background and return once mounted.
fn mount_helper_main(args: &[std::ffi::OsString]) -> ExitCode {
    let h = match mount_helper::parse(args) {
        Ok(h) => h,
        Err(msg) => {
            eprintln!("lsfs: {msg}");
            return ExitCode::from(mount_helper::EXIT_USAGE);
        }
    };
    if !h.options.ignored.is_empty() {
        tracing::debug!("ignored mount options: {}", h.options.ignored.join(","));
    }
    let a = MountArgs {
        image: h.image,
        mountpoint: h.mountpoint,
        checkpoint: None,
        options: Some(h.options),
        threads: None,
        spin_us: None,
        uring: None,
        ring_spin_us: None,
        cache_size: None,
        config: None,
        background: true,
        served_in_background: false,
        quiet: !h.verbose,
    };
    let r = if h.fake {
        // mount -f: everything checked, nothing mounted.
        mount_dir(&a.mountpoint).and_then(|_| {
            std::fs::metadata(&a.image)
                .map(|_| ())
                .map_err(|e| format!("{}: {e}", a.image.display()))
        })
    } else {
        one_malloc_arena();
        mount(a)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("lsfs: {msg}");
            ExitCode::from(mount_helper::EXIT_MOUNT_FAILED)
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn make_image(
    image: &Path,
    size: Option<u64>,
    segment_size: u64,
    label: &str,
    force: bool,
    compress: Option<Compress>,
) -> Result<(), String> {
    if segment_size % 4096 != 0 {
        return Err(format!(
            "--segment-size {segment_size}: must be a multiple of 4096 bytes"
        ));
    }
    match (device_target::object_url(image), size) {
        (Some(url), Some(size)) => device_target::create_object(url, size, segment_size, force)?,
        (Some(url), None) => {
            return Err(format!(
                "{url}: give --size to lay out a file system in an object store"
            ))
        }
        (None, Some(size)) => FileDevice::create_image(image, size).map_err(err)?,
        (None, None) => {}
    }
    let dev = device_target::open(image, true)?;
    let opts = MkfsOptions {
        segment_blocks: (segment_size / 4096) as u32,
        label: label.to_string(),
    };
    let mut config = MountConfig::default();
    if let Some(c) = compress {
        config.store.compress = Some(c);
    }
    let mut fs = Lsfs::mkfs(dev, &opts, config).map_err(err)?;
    fs.unmount().map_err(err)?;
    Ok(())
}

fn looks_like_lsfs(image: &Path) -> bool {
    if let Some(url) = device_target::object_url(image) {
        return device_target::object_holds_lsfs(url).unwrap_or(false);
    }
    let mut b = [0u8; 8];
    std::fs::File::open(image)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok()
        && &b == lsfs_core::log::superblock::SB_MAGIC
}

fn mkfs(a: MkfsArgs) -> Result<(), String> {
    if looks_like_lsfs(&a.image) && !a.force {
        return Err(format!(
            "{} already holds an lsfs file system; use --force to overwrite it",
            a.image.display()
        ));
    }
    if a.size.is_none() && !a.image.exists() && device_target::object_url(&a.image).is_none() {
        return Err(format!(
            "{} does not exist: give --size to create it",
            a.image.display()
        ));
    }
    make_image(
        &a.image,
        a.size,
        a.segment_size,
        &a.label,
        a.force,
        a.compress,
    )?;
    let size = device_target::open(&a.image, false)?.size_bytes();
    if a.json {
        println!(
            "{}",
            json!({ "image": a.image, "size_bytes": size, "segment_bytes": a.segment_size })
        );
    } else {
        println!(
            "made lsfs on {} ({} MiB, {} KiB segments)",
            a.image.display(),
            size >> 20,
            a.segment_size >> 10
        );
    }
    Ok(())
}

fn run(a: RunArgs) -> Result<(), String> {
    if !a.image.exists() {
        eprintln!(
            "lsfs: creating {} ({} MiB, sparse)",
            a.image.display(),
            a.size >> 20
        );
        let segment_bytes = lsfs_core::layout::DEFAULT_SEGMENT_BLOCKS as u64
            * lsfs_core::layout::BLOCK_BYTES as u64;
        make_image(&a.image, Some(a.size), segment_bytes, "lsfs", false, None)?;
    }
    std::fs::create_dir_all(&a.mountpoint)
        .map_err(|e| format!("cannot create {}: {e}", a.mountpoint.display()))?;
    mount(MountArgs {
        image: a.image,
        mountpoint: a.mountpoint,
        checkpoint: None,
        options: None,
        threads: None,
        spin_us: None,
        uring: None,
        ring_spin_us: None,
        cache_size: None,
        config: None,
        background: false,
        served_in_background: false,
        quiet: false,
    })
}

/// Whether a FUSE file system is mounted on `mnt` (a canonical path).
fn is_mounted(mnt: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(&*mnt.to_string_lossy()) && l.contains("fuse"))
}

/// The mount point, made absolute; an error unless it is a directory.
fn mount_dir(mountpoint: &Path) -> Result<PathBuf, String> {
    let dir = std::fs::canonicalize(mountpoint)
        .map_err(|e| format!("mount point {}: {e}", mountpoint.display()))?;
    if !dir.is_dir() {
        return Err(format!(
            "mount point {}: not a directory",
            mountpoint.display()
        ));
    }
    Ok(dir)
}

/// A setting given both as a flag and in `-o`: they must agree.
fn flag_or_option<T: PartialEq + std::fmt::Debug>(
    name: &str,
    flag: Option<T>,
    option: Option<T>,
) -> Result<Option<T>, String> {
    match (flag, option) {
        (Some(f), Some(o)) if f != o => Err(format!(
            "--{} {f:?} and -o {}={o:?} disagree",
            name.replace('_', "-"),
            name
        )),
        (f, o) => Ok(f.or(o)),
    }
}

/// What a read-only mount of object store `t` without `--checkpoint`
/// shows. While a writer holds the store: its newest checkpoint that the
/// store's superblocks name, read through `dev`, the device the mount then
/// opens (so it finds that checkpoint), held and followed as one named with
/// `--checkpoint` (docs/OBJECT_STORE.md). The fsync records after that
/// checkpoint are left out: no checkpoint holds their blocks, the writer
/// may fill their segments again at any time, and a view of them would
/// then fail with EIO, with nothing to follow. With no writer nothing
/// moves: the newest state, records included.
fn reader_checkpoint(
    dev: &mut dyn BlockDevice,
    image: &Path,
    t: &lsfs_object::Target,
) -> Result<Option<u64>, String> {
    if !lsfs_object::readers::writer_holds(t)? {
        return Ok(None);
    }
    let cno = lsfs_core::inspect::newest_superblock(dev)
        .map_err(|e| format!("cannot mount {}: {e}", image.display()))?
        .cp_cno;
    tracing::info!(
        "{}: a writer holds it; showing its newest checkpoint, {cno} \
         (the fsync records after it are not held: `--checkpoint N` chooses another)",
        t.url
    );
    Ok(Some(cno))
}

fn mount(a: MountArgs) -> Result<(), String> {
    let mnt = mount_dir(&a.mountpoint)?;
    let o = a.options.clone().unwrap_or_default();
    // Checked here, before a background server is started.
    let checkpoint = flag_or_option("checkpoint", a.checkpoint, o.checkpoint)?;
    let threads = flag_or_option("threads", a.threads, o.threads)?.unwrap_or(1);
    let spin_us = flag_or_option("spin_us", a.spin_us, o.spin_us)?.unwrap_or(1000);
    let uring = flag_or_option("uring", a.uring, o.uring)?;
    let ring_spin_us =
        flag_or_option("ring_spin_us", a.ring_spin_us, o.ring_spin_us)?.unwrap_or(1000);
    let cache_size = flag_or_option("cache_size", a.cache_size, o.cache_size)?;
    let config = flag_or_option("config", a.config.clone(), o.config.clone())?;
    if a.background {
        return mount_background(&a, &mnt);
    }
    let (read_only, writeback_cache) = (o.read_only, o.writeback_cache);
    let file_cfg = match &config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let mut cfg = file_cfg.mount_config(cache_size, read_only, checkpoint)?;
    if let Some(d) = o.discard {
        cfg.store.discard = d;
    }
    if let Some(c) = o.compress {
        cfg.store.compress = Some(c);
    }
    let object = device_target::object_url(&a.image)
        .map(lsfs_object::Target::parse)
        .transpose()?;
    let wal = file_cfg.object_wal(o.object_wal.clone(), o.object_wal_bytes, object.is_some())?;
    let disk_cache =
        file_cfg.object_disk_cache(o.object_disk_cache.clone(), o.object_disk_cache_bytes)?;
    let hold_secs = file_cfg.reader_hold_secs(o.reader_hold_secs)?;
    let mut dev = device_target::open_cached(
        &a.image,
        !cfg.store.read_only,
        file_cfg.object_cache_bytes()?,
        wal.as_ref(),
        disk_cache.as_ref(),
        file_cfg.object_readahead_segments()?,
    )?;
    let follow_secs = file_cfg.reader_follow_secs(o.reader_follow_secs)?;
    // A reader of the newest checkpoint moves on to newer ones
    // (reader_follow.rs); one of a checkpoint the user named stays on it.
    let mut moves_on = false;
    if let (Some(t), true, None) = (&object, read_only, cfg.checkpoint) {
        cfg.checkpoint = reader_checkpoint(&mut *dev, &a.image, t)?;
        moves_on = cfg.checkpoint.is_some() && follow_secs > 0;
    }
    // A reader of checkpoint N on an object store holds N, so that the
    // writer keeps it (lsfs_object::readers). Taken before the engine's
    // open, to leave the writer as little time as can be to give N up
    // unawares; dropped (the hold deleted) when this function returns, at
    // unmount or on a failed mount.
    let hold = match (&object, cfg.checkpoint) {
        (Some(t), Some(cno)) if hold_secs > 0 => Some(Arc::new(
            lsfs_object::readers::ReaderHold::take(t, cno, hold_secs)?,
        )),
        _ => None,
    };
    // A writer that honours holds has not looked at them yet when its open
    // writes the mount checkpoint, which would give up plain checkpoints
    // past their protection, held ones too: it opens keeping every one,
    // looks at the holds once (below), and only then protects as set.
    let protection_secs = cfg.store.protection_secs;
    let keep_through_open = object.is_some() && !cfg.store.read_only && hold_secs > 0;
    if keep_through_open {
        cfg.store.protection_secs = u64::MAX;
    }
    let mut fs =
        Lsfs::open(dev, cfg).map_err(|e| format!("cannot mount {}: {e}", a.image.display()))?;
    fs.cleaner.set_power_source(Box::new(power::SysfsPower));
    if fs.replayed_records > 0 {
        tracing::info!(
            "recovery rolled forward {} fsync records",
            fs.replayed_records
        );
    }
    let read_only = lsfs_vfs::Vfs::read_only(&fs);
    // Device writes and flushes are queued under the engine's lock and run
    // outside it, by the request (or ticker, or control request) that
    // queued them: see lsfs_core::device::IoQueue.
    fs.defer_io(true).map_err(err)?;
    let fs = Arc::new(Mutex::new(fs));
    let opts = lsfs_fuse::MountOptions {
        fsname: a.image.display().to_string(),
        read_only,
        writeback_cache,
        atomic_writes: o.atomic_writes,
        threads: threads as usize,
        // Root's mounts always let others in (lsfs_fuse's default).
        allow_other: o.allow_other || lsfs_fuse::MountOptions::default().allow_other,
        kernel_flags: o.kernel_flags,
        // Polling burns a CPU while requests come: not on battery.
        spin: if fs.lock().unwrap().cleaner.on_battery() {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_micros(spin_us.into())
        },
        uring: uring.or(file_cfg.uring.map(Into::into)).unwrap_or_default(),
        // As `spin`.
        ring_spin: if fs.lock().unwrap().cleaner.on_battery() {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_micros(ring_spin_us.into())
        },
        // Snapshots never change: the kernel keeps them without expiry.
        cache_forever: Some(lsfs_core::fs::snapview::is_virtual),
        moves_on,
        ..Default::default()
    };
    // The writer keeps the checkpoints readers hold, looking every few
    // seconds; `lsfs stats` shows what it found.
    let holds = match &object {
        Some(t) if !read_only && hold_secs > 0 => {
            let mut w = lsfs_object::readers::Writer::new(t, hold_secs)?;
            let cache = opts.kernel_cache.clone();
            w.on_change = Some(Box::new(move |cno| {
                control::forget_snapshot(&cache, Some(cno))
            }));
            if let Err(e) = w.round(&fs) {
                tracing::warn!("readers' holds, at mount: {e}");
            }
            Some(w)
        }
        _ => None,
    };
    if keep_through_open {
        fs.lock()
            .unwrap()
            .store
            .set_protection_secs(protection_secs);
    }
    let fuse = control::FuseSide {
        mountpoint: a.mountpoint.clone(),
        counters: opts.counters.clone(),
        kernel_cache: opts.kernel_cache.clone(),
        readers: holds.as_ref().map(|w| w.status.clone()),
    };
    let sock = control::serve(fs.clone(), fuse).map_err(|e| format!("control socket: {e}"))?;
    let holds = match holds {
        Some(w) => Some(lsfs_object::readers::spawn_writer(
            w,
            fs.clone(),
            std::time::Duration::from_secs(lsfs_object::readers::WRITER_ROUND_SECS),
        )?),
        None => None,
    };
    let follower = if moves_on {
        Some(reader_follow::spawn(
            fs.clone(),
            hold.clone(),
            opts.kernel_cache.clone(),
            std::time::Duration::from_secs(follow_secs),
        )?)
    } else {
        None
    };
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            const TICK: std::time::Duration = std::time::Duration::from_millis(500);
            let mut next_tick = std::time::Instant::now() + TICK;
            let mut reclaiming = false;
            while !stop.load(Ordering::Relaxed) {
                if reclaiming {
                    // Deleted files' blocks, a bounded step at a time with
                    // the lock let go in between, so requests wait for one
                    // step at most.
                    let (r, done) = lsfs_core::fs::locked::call(&fs, false, |fs| {
                        fs.reclaim_step(lsfs_core::fs::RECLAIM_BLOCKS_PER_STEP)
                            .map(|_| fs.reclaim_pending())
                    });
                    match r.and_then(|more| done.map(|_| more)) {
                        Ok(more) => reclaiming = more,
                        Err(e) => {
                            tracing::error!("freeing deleted files' blocks failed: {e}");
                            reclaiming = false;
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                } else {
                    std::thread::sleep(
                        next_tick.saturating_duration_since(std::time::Instant::now()),
                    );
                }
                if std::time::Instant::now() < next_tick {
                    continue;
                }
                next_tick = std::time::Instant::now() + TICK;
                let (r, done) = lsfs_core::fs::locked::call(&fs, false, |fs| {
                    fs.tick().map(|_| fs.reclaim_pending())
                });
                match r.and_then(|more| done.map(|_| more)) {
                    Ok(more) => reclaiming = more,
                    Err(e) => tracing::error!("periodic checkpoint failed: {e}"),
                }
            }
        })
    };
    if !a.served_in_background {
        // Said once the kernel shows the mount, not before: mounting can
        // still fail.
        let (image, shown) = (a.image.clone(), a.mountpoint.clone());
        std::thread::spawn(move || {
            for _ in 0..200 {
                if is_mounted(&mnt) {
                    eprintln!(
                        "lsfs: {} mounted on {} (Ctrl-C to unmount)",
                        image.display(),
                        shown.display()
                    );
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
    }
    let served = lsfs_fuse::mount_foreground(fs.clone(), &a.mountpoint, &opts);
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.join();
    // No promotion or demotion after the last checkpoint.
    drop(holds);
    // The view stays where it is from here on.
    drop(follower);
    sock.remove();
    let closed = fs.lock().unwrap_or_else(|p| p.into_inner()).unmount();
    served.map_err(err)?;
    closed.map_err(|e| format!("final checkpoint failed: {e}"))?;
    eprintln!("lsfs: unmounted {}", a.mountpoint.display());
    Ok(())
}

fn mount_background(a: &MountArgs, mnt: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount")
        .arg(&a.image)
        .arg(&a.mountpoint)
        .arg("--served-in-background");
    if let Some(c) = a.checkpoint {
        cmd.arg("--checkpoint").arg(c.to_string());
    }
    if let Some(o) = &a.options {
        cmd.arg("-o").arg(o.to_string());
    }
    if let Some(t) = a.threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    if let Some(s) = a.spin_us {
        cmd.arg("--spin-us").arg(s.to_string());
    }
    if let Some(s) = a.ring_spin_us {
        cmd.arg("--ring-spin-us").arg(s.to_string());
    }
    if let Some(u) = a.uring {
        cmd.arg("--uring").arg(u.to_string());
    }
    if let Some(c) = a.cache_size {
        cmd.arg("--cache-size").arg(c.to_string());
    }
    if let Some(c) = &a.config {
        cmd.arg("--config").arg(c);
    }
    // The server's log goes to a file beside the mount point, as its control
    // socket does: an inherited stderr would keep a caller's pipe open (and
    // `$(lsfs mount --background …)` waiting) until the unmount.
    let name = mnt.file_name().unwrap_or_default().to_string_lossy();
    let log_path = mnt
        .parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".{name}.lsfs.log"));
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| format!("log file {}: {e}", log_path.display()))?
    };
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    // Its own session: neither Ctrl-C nor the hangup of the terminal that
    // ran `mount` or `lsfs mount --background` reaches the server.
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(err)?;
    for _ in 0..200 {
        if let Some(status) = child.try_wait().map_err(err)? {
            let said = std::fs::read(&log_path).unwrap_or_default();
            let said = String::from_utf8_lossy(&said[(log_start as usize).min(said.len())..]);
            return Err(format!("mount failed ({status}): {}", said.trim()));
        }
        if is_mounted(mnt) {
            if a.quiet {
                return Ok(());
            }
            eprintln!(
                "lsfs: {} mounted on {} (unmount with `fusermount3 -u {}`; log in {})",
                a.image.display(),
                a.mountpoint.display(),
                a.mountpoint.display(),
                log_path.display()
            );
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(format!(
        "{} did not appear within 10 s",
        a.mountpoint.display()
    ))
}

/// Run a control request on a mounted file system or an unmounted image.
fn control_request(t: &Target, req: serde_json::Value) -> Result<serde_json::Value, String> {
    match (&t.mount, &t.image) {
        (Some(m), _) => control::request(m, &req),
        (None, Some(img)) => {
            let dev = device_target::open(img, true)?;
            let mut fs = Lsfs::open(dev, MountConfig::default()).map_err(err)?;
            fs.cleaner.set_power_source(Box::new(power::SysfsPower));
            let r = control::execute(&mut fs, &req);
            fs.unmount().map_err(err)?;
            r
        }
        (None, None) => Err("give --mount MOUNTPOINT or --image IMAGE".into()),
    }
}

/// Whether an entry of a `list` reply is a snapshot.
fn is_snapshot(c: &serde_json::Value) -> bool {
    let flags = c["flags"].as_u64().unwrap_or(0);
    flags & u64::from(lsfs_core::meta::cpfile::CP_SNAPSHOT) != 0
}

fn print_checkpoints(v: &serde_json::Value, json_out: bool, only_snapshots: bool) {
    if json_out {
        println!("{v}");
        return;
    }
    println!(
        "{:>8}  {:<10}  {:<19}  {:>10}  {:>12}",
        "CNO", "MODE", "CREATED (UTC)", "INODES", "BLOCKS"
    );
    for c in v["checkpoints"].as_array().into_iter().flatten() {
        let snap = is_snapshot(c);
        if only_snapshots && !snap {
            continue;
        }
        println!(
            "{:>8}  {:<10}  {:<19}  {:>10}  {:>12}",
            c["cno"].as_u64().unwrap_or(0),
            if snap { "snapshot" } else { "checkpoint" },
            lsfs_core::inspect::utc_date(c["created_secs"].as_u64().unwrap_or(0)),
            c["inodes_used"].as_u64().unwrap_or(0),
            c["blocks_used"].as_u64().unwrap_or(0)
        );
    }
}

fn checkpoint_cmd(a: CpArgs) -> Result<(), String> {
    let req = match &a.action {
        CpAction::List => json!({ "cmd": "list" }),
        CpAction::Create => json!({ "cmd": "checkpoint" }),
        CpAction::Delete { cno } => json!({ "cmd": "delete", "cno": cno }),
        CpAction::Promote { cno } => json!({ "cmd": "promote", "cno": cno }),
        CpAction::Demote { cno } => json!({ "cmd": "demote", "cno": cno }),
    };
    let v = control_request(&a.target, req)?;
    match a.action {
        CpAction::List => print_checkpoints(&v, a.target.json, false),
        _ if a.target.json => println!("{v}"),
        CpAction::Create => println!("checkpoint {}", v["cno"]),
        CpAction::Delete { cno } => println!("deleted checkpoint {cno}"),
        CpAction::Promote { cno } => println!("checkpoint {cno} is now a snapshot"),
        CpAction::Demote { cno } => println!("{}", demoted_message(cno)),
    }
    Ok(())
}

/// What a demoted snapshot is now, said where one is demoted.
fn demoted_message(cno: u64) -> String {
    format!(
        "snapshot {cno} is now a plain checkpoint: gone from `lsfs snapshot list`, still in \
         `lsfs checkpoint list` until it is older than the protection period \
         (`lsfs checkpoint delete {cno}` deletes it now)"
    )
}

fn snapshot_cmd(a: SnapArgs) -> Result<(), String> {
    let req = match &a.action {
        SnapAction::List => json!({ "cmd": "list" }),
        SnapAction::Create => json!({ "cmd": "snapshot" }),
        SnapAction::Delete { cno, .. } => {
            // Demoting a plain checkpoint does nothing, and deleting it
            // then would delete a checkpoint that was never a snapshot.
            let list = control_request(&a.target, json!({ "cmd": "list" }))?;
            let entry = list["checkpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["cno"].as_u64() == Some(*cno));
            match entry {
                None => return Err(format!("there is no checkpoint {cno}")),
                Some(c) if !is_snapshot(c) => {
                    return Err(format!(
                        "checkpoint {cno} is not a snapshot (see `lsfs snapshot list`)"
                    ))
                }
                Some(_) => json!({ "cmd": "demote", "cno": cno }),
            }
        }
    };
    let v = control_request(&a.target, req)?;
    // Demoting wrote a newer checkpoint, so the demoted one is not the
    // latest and can go too.
    let v = match a.action {
        SnapAction::Delete {
            cno,
            keep_checkpoint: false,
        } => control_request(&a.target, json!({ "cmd": "delete", "cno": cno })).map_err(|e| {
            format!(
                "{}; but deleting checkpoint {cno} failed: {e}",
                demoted_message(cno)
            )
        })?,
        _ => v,
    };
    match a.action {
        SnapAction::List => print_checkpoints(&v, a.target.json, true),
        _ if a.target.json => println!("{v}"),
        SnapAction::Create => println!("snapshot {}", v["cno"]),
        SnapAction::Delete {
            cno,
            keep_checkpoint: true,
        } => println!("{}", demoted_message(cno)),
        SnapAction::Delete { cno, .. } => println!("deleted snapshot {cno} and its checkpoint"),
    }
    Ok(())
}

fn trim_cmd(a: TrimArgs) -> Result<(), String> {
    let req = json!({ "cmd": "trim", "start": a.offset, "len": a.length.unwrap_or(u64::MAX),
                      "minlen": a.minimum });
    let v = control_request(&a.target, req)?;
    if a.target.json {
        println!("{v}");
    } else {
        let what = a
            .target
            .mount
            .as_ref()
            .or(a.target.image.as_ref())
            .map_or(String::new(), |p| p.display().to_string());
        // fstrim -v's wording.
        let bytes = v["trimmed_bytes"].as_u64().unwrap_or(0);
        println!(
            "{what}: {} ({bytes} bytes) trimmed",
            stats_text::size(bytes)
        );
    }
    Ok(())
}

fn stats_cmd(a: StatsArgs) -> Result<(), String> {
    let v = control::request(&a.mount, &json!({ "cmd": "stats" }))?;
    if a.json {
        println!("{}", v["stats"]);
    } else {
        println!(
            "{}",
            gc_cmd::write_amplification_line(&v["stats"]["write_amplification"])
        );
        print!("{}", stats_text::stats_text(&v["stats"]));
    }
    Ok(())
}

fn gc(a: GcArgs) -> Result<(), String> {
    let m = a.mount.as_deref().ok_or("give --mount MOUNTPOINT")?;
    match a.action {
        GcAction::Status => gc_cmd::status(m, a.json),
        GcAction::Run { segments } => gc_cmd::run(m, segments, a.json),
        GcAction::Stats => gc_cmd::stats(m, a.json).map(|_| ()),
        GcAction::Start => gc_cmd::control(m, json!({ "cmd": "gc-start" }), a.json),
        GcAction::Stop => gc_cmd::control(m, json!({ "cmd": "gc-stop" }), a.json),
        GcAction::Policy { name } => {
            gc_cmd::control(m, json!({ "cmd": "gc-policy", "policy": name }), a.json)
        }
        GcAction::Threaded { mode } => {
            gc_cmd::control(m, json!({ "cmd": "gc-threaded", "mode": mode }), a.json)
        }
        GcAction::Plot { out } => {
            gc_cmd::plot(m, &out)?;
            println!("wrote {}", out.display());
            Ok(())
        }
    }
}
