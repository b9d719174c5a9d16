//! scripts/install.sh into a scratch prefix: the binary, the links mount(8)
//! runs, man pages and completions land where their readers look, and
//! --uninstall takes back exactly those.

use std::path::{Path, PathBuf};
use std::process::Command;

fn install_sh(args: &[&Path]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn install_and_uninstall_into_a_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("usr");
    let sbin = tmp.path().join("sbin");
    let man1 = prefix.join("share/man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    std::fs::write(man1.join("other.1"), "not ours").unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_lsfs"));
    let p = |s: &str| Path::new(s).to_path_buf();
    let said = install_sh(&[
        &p("--prefix"),
        &prefix,
        &p("--sbin"),
        &sbin,
        &p("--bin"),
        &bin,
    ]);
    assert!(said.contains("installed lsfs"), "{said}");

    let lsfs = prefix.join("bin/lsfs");
    for link in ["mount.fuse.lsfs", "mount.lsfs"] {
        assert_eq!(std::fs::read_link(sbin.join(link)).unwrap(), lsfs, "{link}");
    }
    // The link answers as mount(8)'s helper.
    let out = Command::new(sbin.join("mount.fuse.lsfs")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected SOURCE and MOUNTPOINT"), "{err}");

    for page in ["lsfs.1", "lsfs-mount.1", "lsfs-snapshot-delete.1"] {
        assert!(man1.join(page).exists(), "{page}");
    }
    for (file, says) in [
        (
            "share/bash-completion/completions/lsfs",
            "complete -F _lsfs",
        ),
        ("share/zsh/site-functions/_lsfs", "#compdef lsfs"),
        (
            "share/fish/vendor_completions.d/lsfs.fish",
            "complete -c lsfs",
        ),
    ] {
        let text = std::fs::read_to_string(prefix.join(file)).unwrap();
        assert!(text.contains(says), "{file}");
        assert!(text.contains("snapshot"), "{file}: no subcommands");
    }

    install_sh(&[
        &p("--prefix"),
        &prefix,
        &p("--sbin"),
        &sbin,
        &p("--uninstall"),
    ]);
    assert!(!lsfs.exists() && !sbin.join("mount.lsfs").exists());
    assert!(std::fs::symlink_metadata(sbin.join("mount.fuse.lsfs")).is_err());
    assert!(!man1.join("lsfs.1").exists() && !man1.join("lsfs-mount.1").exists());
    assert!(
        man1.join("other.1").exists(),
        "uninstall removed a page not ours"
    );
    assert!(!prefix
        .join("share/bash-completion/completions/lsfs")
        .exists());
}
