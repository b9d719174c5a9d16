//! `lsfs man` and `lsfs completions`, which the install step puts in
//! place: generated from the command-line definition, so every subcommand
//! is in them.

use std::process::{Command, Output};

fn lsfs(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_lsfs"))
        .args(args)
        .output()
        .expect("run lsfs");
    assert!(
        out.status.success(),
        "lsfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The subcommands `lsfs --help` lists (help excluded), read from the
/// help text rather than written down here, so a new one is covered too.
fn subcommands() -> Vec<String> {
    let help = String::from_utf8(lsfs(&["--help"]).stdout).unwrap();
    let section = help
        .split("Commands:\n")
        .nth(1)
        .expect("a Commands section")
        .split("\n\n")
        .next()
        .unwrap();
    let names: Vec<String> = section
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    names
}

#[test]
fn the_man_page_names_every_subcommand() {
    let page = String::from_utf8(lsfs(&["man"]).stdout).unwrap();
    assert!(
        page.starts_with(".ie"),
        "not roff: {}",
        &page[..80.min(page.len())]
    );
    assert!(page.contains(".TH lsfs 1"), "no title header");
    for sub in subcommands() {
        // roff escapes the hyphen: lsfs\-mount(1).
        let reference = format!("lsfs\\-{sub}(1)");
        assert!(page.contains(&reference), "{reference} not in lsfs(1)");
    }
}

#[test]
fn man_out_writes_a_page_per_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    lsfs(&["man", "--out", dir.to_str().unwrap()]);
    for sub in subcommands() {
        let page = dir.join(format!("lsfs-{sub}.1"));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(
            text.contains(&format!(".TH lsfs-{sub} 1")),
            "{}",
            page.display()
        );
    }
    let mount = std::fs::read_to_string(dir.join("lsfs-mount.1")).unwrap();
    assert!(
        mount.contains("\\-\\-background"),
        "the mount page lacks its flags"
    );
    assert!(
        dir.join("lsfs-gc-run.1").exists(),
        "nested subcommands get pages"
    );
}

#[test]
fn completion_scripts_know_the_subcommands() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish"] {
        let script = String::from_utf8(lsfs(&["completions", shell]).stdout).unwrap();
        assert!(!script.is_empty(), "{shell}: empty");
        for sub in &subs {
            assert!(script.contains(sub.as_str()), "{shell}: no {sub}");
        }
    }
    let bash = String::from_utf8(lsfs(&["completions", "bash"]).stdout).unwrap();
    assert!(bash.contains("complete -F _lsfs"), "bash: not registered");
    // The mount flags complete too.
    assert!(bash.contains("--cache-size"), "bash: no --cache-size");
    let out = Command::new(env!("CARGO_BIN_EXE_lsfs"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "an unknown shell is refused");
}
