//! Stand-alone front end for the simulators until `lsfs sim` embeds them.

use clap::Parser;
use lsfs_sim::cli::{run, SimCommand};

#[derive(Parser)]
#[command(
    name = "lsfs-sim",
    about = "lsfs simulators: GC, cache, FTL, workloads"
)]
struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

fn main() {
    if let Err(e) = run(Args::parse().command) {
        eprintln!("lsfs-sim: {e}");
        std::process::exit(1);
    }
}
