//! Mounts an empty in-memory file system (the reference model) in the
//! foreground until Ctrl-C, SIGTERM or `fusermount3 -u`.
//!
//! Usage: `cargo run -p lsfs-fuse --example memfs -- MOUNTPOINT [FSNAME]`

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use lsfs_fuse::{mount_foreground, MountOptions};
use lsfs_vfs::model::MemFs;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(mountpoint) = args.next().map(PathBuf::from) else {
        eprintln!("usage: memfs MOUNTPOINT [FSNAME]");
        return ExitCode::from(2);
    };
    let opts = MountOptions {
        fsname: args
            .next()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "memfs".to_string()),
        ..MountOptions::default()
    };
    let fs = Arc::new(Mutex::new(MemFs::new()));
    match mount_foreground(fs, &mountpoint, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memfs: {e}");
            ExitCode::FAILURE
        }
    }
}
