use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::access::AccessSpec;
use crate::cache::write_trace;
use crate::workload::aging::Aging;
use crate::workload::kang::KangWorkload;
use crate::workload::nfs_replay::{replay_file, ReplayOptions};
use crate::workload::nfs_synth::{NfsSynth, SynthOptions};
use crate::workload::small_files::SmallFiles;

use super::CommonArgs;

#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    #[command(subcommand)]
    pub kind: WorkloadKind,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum WorkloadKind {
    /// Rohner's hot/cold small-file workload in DIR: FILES files, then ROUNDS × FILES overwrites,
    /// HOT_WRITES of them to the first HOT_FRACTION of the files.
    HotCold {
        dir: PathBuf,
        #[command(flatten)]
        files: SmallFileArgs,
        #[arg(long, default_value_t = 0.1)]
        hot_fraction: f64,
        #[arg(long, default_value_t = 0.9)]
        hot_writes: f64,
    },
    /// The same small files, overwritten uniformly at random.
    Uniform {
        dir: PathBuf,
        #[command(flatten)]
        files: SmallFileArgs,
    },
    /// The same small files, file of rank r overwritten with probability ∝ 1/(r+1)^EXPONENT.
    Zipf {
        dir: PathBuf,
        #[command(flatten)]
        files: SmallFileArgs,
        #[arg(long, default_value_t = 1.0)]
        exponent: f64,
    },
    /// yFS's aging workload in DIR.
    Aging {
        dir: PathBuf,
        #[arg(long, default_value_t = 10_000)]
        operations: u64,
        #[arg(long, default_value_t = 5_000)]
        max_files: usize,
        #[arg(long, default_value_t = 64 << 20)]
        max_file_bytes: u64,
        /// Continue on the files and directories an earlier aging run left in DIR.
        #[arg(long)]
        resume: bool,
        /// At most this many operations per second (default: unpaced).
        #[arg(long)]
        rate: Option<f64>,
    },
    /// Replay an NFS trace in Ellard's text format (Harvard EECS03/DEAS03/CAMPUS/lair62) as
    /// system calls in DIR. TRACE `-` reads standard input (`zcat t.txt.gz | … nfs-replay - DIR`).
    /// Prints a JSON summary: calls applied, and skipped with the reason, per procedure.
    NfsReplay {
        trace: PathBuf,
        dir: PathBuf,
        /// A call without a reply after this many seconds of trace time is given up.
        #[arg(long, default_value_t = 300.0)]
        reply_timeout_secs: f64,
        /// Writes and truncates beyond this size are skipped.
        #[arg(long, default_value_t = 1 << 32)]
        max_file_bytes: u64,
    },
    /// Write a seeded synthetic NFS trace in Ellard's text format (see workload::nfs_synth).
    NfsSynth {
        out: PathBuf,
        #[arg(long, default_value_t = 100_000)]
        operations: u64,
        #[arg(long, default_value_t = 8)]
        clients: u32,
        #[arg(long, default_value_t = 5_000)]
        max_files: usize,
        #[arg(long, default_value_t = 1 << 20)]
        max_file_bytes: u64,
        #[arg(long, default_value_t = 0.03)]
        error_fraction: f64,
        #[arg(long, default_value_t = 0.0)]
        lost_reply_fraction: f64,
        #[arg(long, default_value_t = 8)]
        reorder_window: usize,
    },
    /// Write a synthetic Kang Table 2-2 page trace (video, mixed, fileserver, tpcc).
    KangTrace {
        workload: String,
        out: PathBuf,
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Run an external benchmark from Debian (fio, dbench, postmark, fs_mark) in DIR with the
    /// settings used in docs/REPRODUCTION.md.
    Run { tool: String, dir: PathBuf },
}

/// What the small-file workloads (hot-cold, uniform, zipf) share.
#[derive(clap::Args, Debug, Clone)]
pub struct SmallFileArgs {
    #[arg(long, default_value_t = 100_000)]
    pub files: u64,
    #[arg(long, default_value_t = 4096)]
    pub file_bytes: usize,
    /// Overwrites after creation, in multiples of the file count.
    #[arg(long, default_value_t = 4.0)]
    pub rounds: f64,
    #[arg(long)]
    pub fsync: bool,
    /// The files exist (an earlier run with the same --files made them): only overwrite.
    #[arg(long)]
    pub existing: bool,
    /// At most this many overwrites per second (default: unpaced).
    #[arg(long)]
    pub rate: Option<f64>,
}

impl SmallFileArgs {
    fn workload(&self, access: AccessSpec, seed: u64) -> SmallFiles {
        SmallFiles {
            files: self.files,
            file_bytes: self.file_bytes,
            access,
            overwrites: (self.rounds * self.files as f64) as u64,
            fsync: self.fsync,
            existing: self.existing,
            overwrites_per_sec: self.rate,
            seed,
        }
    }
}

pub(super) fn run(args: WorkloadArgs) -> Result<(), Box<dyn Error>> {
    let seed = args.common.seed;
    let progress = !args.common.quiet;
    let json = |v: &dyn erased::Json| -> Result<(), Box<dyn Error>> { v.print() };
    match args.kind {
        WorkloadKind::HotCold {
            dir,
            files,
            hot_fraction,
            hot_writes,
        } => {
            let access = AccessSpec::HotCold {
                hot_fraction,
                hot_write_fraction: hot_writes,
            };
            json(&files.workload(access, seed).run(&dir, progress)?)
        }
        WorkloadKind::Uniform { dir, files } => json(
            &files
                .workload(AccessSpec::Uniform, seed)
                .run(&dir, progress)?,
        ),
        WorkloadKind::Zipf {
            dir,
            files,
            exponent,
        } => json(
            &files
                .workload(AccessSpec::Zipf { exponent }, seed)
                .run(&dir, progress)?,
        ),
        WorkloadKind::Aging {
            dir,
            operations,
            max_files,
            max_file_bytes,
            resume,
            rate,
        } => {
            std::fs::create_dir_all(&dir)?;
            let a = Aging {
                operations,
                max_files,
                max_file_bytes,
                resume,
                operations_per_sec: rate,
                seed,
            };
            json(&a.run(&dir, progress)?)
        }
        WorkloadKind::KangTrace {
            workload,
            out,
            scale,
        } => {
            let w = KangWorkload::from_name(&workload)
                .ok_or(format!("unknown workload {workload:?}"))?;
            let trace = w.generate(scale, seed);
            write_trace(
                &mut std::io::BufWriter::new(std::fs::File::create(&out)?),
                &trace,
            )?;
            eprintln!("{} requests written to {}", trace.len(), out.display());
            Ok(())
        }
        WorkloadKind::NfsReplay {
            trace,
            dir,
            reply_timeout_secs,
            max_file_bytes,
        } => {
            let opts = ReplayOptions {
                reply_timeout_secs,
                max_file_bytes,
                ..ReplayOptions::default()
            };
            json(&replay_file(&trace, &dir, opts, progress)?)
        }
        WorkloadKind::NfsSynth {
            out,
            operations,
            clients,
            max_files,
            max_file_bytes,
            error_fraction,
            lost_reply_fraction,
            reorder_window,
        } => {
            let opts = SynthOptions {
                operations,
                clients,
                max_files,
                max_file_bytes,
                error_fraction,
                lost_reply_fraction,
                reorder_window,
                seed,
                ..SynthOptions::default()
            };
            let mut w = std::io::BufWriter::new(std::fs::File::create(&out)?);
            let (report, _) = NfsSynth::new(opts).write_trace(&mut w)?;
            w.flush()?;
            json(&report)
        }
        WorkloadKind::Run { tool, dir } => run_external(&tool, &dir),
    }
}

mod erased {
    /// Print any serialisable report as JSON (reports are always machine-readable).
    pub trait Json {
        fn print(&self) -> Result<(), Box<dyn std::error::Error>>;
    }
    impl<T: serde::Serialize> Json for T {
        fn print(&self) -> Result<(), Box<dyn std::error::Error>> {
            println!("{}", serde_json::to_string_pretty(self)?);
            Ok(())
        }
    }
}

/// The standard invocation of each external benchmark (Rohner's dbench settings; fio random
/// 4 KiB writes with fsync; yFS-like PostMark; fs_mark small files).
fn run_external(tool: &str, dir: &std::path::Path) -> Result<(), Box<dyn Error>> {
    let d = dir.display().to_string();
    let (program, args, stdin): (&str, Vec<String>, Option<String>) = match tool {
        "fio" => (
            "fio",
            vec![
                "--name=randwrite".into(),
                format!("--directory={d}"),
                "--rw=randwrite".into(),
                "--bs=4k".into(),
                "--size=256m".into(),
                "--fsync=1".into(),
                "--runtime=60".into(),
                "--time_based".into(),
                "--output-format=json".into(),
            ],
            None,
        ),
        "dbench" => (
            "dbench",
            vec!["-D".into(), d, "-t".into(), "600".into(), "6".into()],
            None,
        ),
        "postmark" => (
            "postmark",
            vec![],
            Some(format!(
                "set location {d}\nset number 150000\nset transactions 150000\nrun\nquit\n"
            )),
        ),
        "fsmark" | "fs_mark" => (
            "fs_mark",
            vec![
                "-d".into(),
                d,
                "-s".into(),
                "4096".into(),
                "-n".into(),
                "10000".into(),
                "-L".into(),
                "5".into(),
            ],
            None,
        ),
        other => {
            return Err(format!("unknown tool {other:?} (fio, dbench, postmark, fsmark)").into())
        }
    };
    eprintln!("running: {program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(&args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .spawn()
        .map_err(|e| {
            format!(
                "{program}: {e} (Debian: apt-get install {})",
                debian_package(program)
            )
        })?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())?;
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("{program} exited with {status}").into());
    }
    Ok(())
}

fn debian_package(program: &str) -> &str {
    match program {
        "fs_mark" => "fsmark (not in Debian main: build from source)",
        other => other,
    }
}
