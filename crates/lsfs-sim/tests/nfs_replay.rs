//! The NFS trace replayer against a hand-made Ellard-format trace and against synthetic traces
//! whose final namespace is known.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use lsfs_sim::workload::nfs_replay::{anonymous_name, replay_file, ReplayOptions, ReplayReport};
use lsfs_sim::workload::nfs_synth::{Entry, NfsSynth, SynthOptions};

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lsfs-nfs-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Every path under `dir` and what it holds (as the synthetic model describes its namespace).
fn walk(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            let md = fs::symlink_metadata(e.path()).unwrap();
            let entry = if md.file_type().is_symlink() {
                Entry::Symlink(
                    fs::read_link(e.path())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                )
            } else if md.is_dir() {
                stack.push((e.path(), format!("{name}/")));
                Entry::Dir
            } else {
                Entry::File(md.len())
            };
            out.insert(name, entry);
        }
    }
    out
}

fn skipped(r: &ReplayReport, op: &str, why: &str) -> u64 {
    r.by_op
        .get(op)
        .and_then(|c| c.skipped.get(why).copied())
        .unwrap_or(0)
}

fn applied(r: &ReplayReport, op: &str) -> u64 {
    r.by_op.get(op).map_or(0, |c| c.applied)
}

#[test]
fn the_hand_made_trace_replays_to_the_expected_tree() {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ellard-small.txt");
    let dir = temp_dir("fixture");
    let r = replay_file(&trace, &dir, ReplayOptions::default(), false).unwrap();
    assert_eq!(r.parse_errors, 0, "{:?}", r.first_parse_errors);

    // Paths rebuilt from LOOKUP/CREATE/MKDIR replies under the export root's directory;
    // the handle written before it was named moved to its name; the rename moved the file;
    // the hard link keeps the data after the first name is removed; tmp came and went.
    let root = anonymous_name("aa00");
    let got = walk(&dir);
    let want: BTreeMap<String, Entry> = [
        (root.clone(), Entry::Dir),
        (format!("{root}/home"), Entry::Dir),
        (format!("{root}/home/alice"), Entry::Dir),
        (format!("{root}/home/alice/notes-link"), Entry::File(0x200)),
        (format!("{root}/home/final.txt"), Entry::File(0x2000)),
        (format!("{root}/home/late.dat"), Entry::File(0x10)),
        (
            format!("{root}/home/link"),
            Entry::Symlink("etc/passwd".into()),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);

    // Pairing: same xid from two clients, replies out of order, one retransmission.
    assert_eq!(r.retransmissions, 1);
    assert_eq!(applied(&r, "create"), 2);
    assert_eq!(applied(&r, "mkdir"), 2);
    assert_eq!(applied(&r, "write"), 5);
    assert_eq!(applied(&r, "lookup"), 2);
    assert_eq!(applied(&r, "rename"), 1);
    assert_eq!(applied(&r, "link"), 1);
    assert_eq!(applied(&r, "symlink"), 1);
    assert_eq!(applied(&r, "setattr"), 1);
    assert_eq!(applied(&r, "remove"), 1);
    assert_eq!(applied(&r, "rmdir"), 1);
    assert_eq!(applied(&r, "read"), 1);
    assert_eq!(applied(&r, "getattr"), 1);
    // Error replies, the unanswered call and the orphan reply are skipped, with reasons.
    assert_eq!(skipped(&r, "lookup", "error reply NOENT"), 1);
    assert_eq!(skipped(&r, "create", "error reply EXIST"), 1);
    assert_eq!(skipped(&r, "remove", "no reply"), 1);
    assert_eq!(skipped(&r, "remove", "reply without call"), 1);
    assert_eq!(skipped(&r, "access", "no effect to replay"), 1);
    assert_eq!(r.skipped, 5);
    assert_eq!(r.bytes_written, 0x2000 + 0x800 + 0x10 + 0x100 + 0x800);
    assert_eq!(r.bytes_read, 0x1000);
    fs::remove_dir_all(&dir).unwrap();
}

fn synth(opts: SynthOptions, tag: &str) -> (PathBuf, BTreeMap<String, Entry>) {
    let dir = temp_dir(tag);
    let trace = dir.join("trace.txt");
    let mut out = std::io::BufWriter::new(fs::File::create(&trace).unwrap());
    let (_, tree) = NfsSynth::new(opts).write_trace(&mut out).unwrap();
    drop(out);
    (dir, tree)
}

/// With replies reordered, errors and retransmissions but none lost, the replay rebuilds the
/// model's namespace exactly: every name, every file size, every symlink.
#[test]
fn a_synthetic_trace_replays_to_the_model_namespace() {
    for seed in 1..=3 {
        let opts = SynthOptions {
            operations: 20_000,
            max_files: 400,
            max_file_bytes: 256 << 10,
            reorder_window: 16,
            seed,
            ..SynthOptions::default()
        };
        let (dir, tree) = synth(opts, &format!("synth{seed}"));
        let out = dir.join("replay");
        let r = replay_file(
            &dir.join("trace.txt"),
            &out,
            ReplayOptions::default(),
            false,
        )
        .unwrap();
        assert_eq!(r.parse_errors, 0);
        assert!(r.applied > 10_000, "{r:?}");
        let no_reply: u64 = r
            .by_op
            .values()
            .filter_map(|c| c.skipped.get("no reply"))
            .sum();
        assert_eq!(no_reply, 0);
        let got = walk(&out.join(NfsSynth::root_dir_name()));
        let want_names: Vec<&String> = tree.keys().collect();
        let got_names: Vec<&String> = got.keys().collect();
        assert_eq!(got_names, want_names, "seed {seed}");
        assert_eq!(got, tree, "seed {seed}");
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// Lost replies leave the replay incomplete but never wrong about what it did apply, and every
/// lost reply is accounted for.
#[test]
fn lost_replies_are_counted_as_calls_without_reply() {
    let opts = SynthOptions {
        operations: 5_000,
        max_files: 200,
        max_file_bytes: 64 << 10,
        lost_reply_fraction: 0.05,
        seed: 9,
        ..SynthOptions::default()
    };
    let dir = temp_dir("lost");
    let trace = dir.join("trace.txt");
    let mut out = std::io::BufWriter::new(fs::File::create(&trace).unwrap());
    let (report, _) = NfsSynth::new(opts).write_trace(&mut out).unwrap();
    drop(out);
    let r = replay_file(&trace, &dir.join("replay"), ReplayOptions::default(), false).unwrap();
    let no_reply: u64 = r
        .by_op
        .values()
        .filter_map(|c| c.skipped.get("no reply"))
        .sum();
    assert_eq!(no_reply, report.lost_replies);
    assert_eq!(r.calls, report.calls + r.retransmissions);
    assert_eq!(r.applied + r.skipped, report.calls);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_same_seed_writes_the_same_trace() {
    let opts = SynthOptions {
        operations: 2_000,
        seed: 5,
        ..SynthOptions::default()
    };
    let mut a = Vec::new();
    let mut b = Vec::new();
    NfsSynth::new(opts.clone()).write_trace(&mut a).unwrap();
    NfsSynth::new(opts).write_trace(&mut b).unwrap();
    assert_eq!(a, b);
}
