//! The CLI as other tools use it: a reporting command whose reader goes away
//! (`lsfs sim gc --json | head -c 20`) ends quietly on SIGPIPE instead of
//! panicking on EPIPE with a backtrace.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn a_closed_pipe_ends_a_report_quietly() {
    // About 150 KiB of JSON: more than a pipe holds, so the writer meets the
    // closed pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lsfs"))
        .args([
            "sim",
            "gc",
            "--disk-blocks",
            "65536",
            "--policies",
            "all",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lsfs");
    let mut first = [0u8; 20];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is closed here.
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "{status:?}, stderr: {err}"
    );
}
