//! `lsfs` as mount(8)'s helper, so that `mount -t fuse.lsfs IMAGE DIR` and
//! an `/etc/fstab` line work. Two conventions reach it:
//!
//! - mount.fuse3 (fuse3's `/sbin/mount.fuse`, which mount(8) runs for any
//!   `fuse.TYPE`) runs `TYPE SOURCE MOUNTPOINT -o OPTIONS` through
//!   `/bin/sh` with mount(8)'s PATH dropped, so `lsfs` must be in
//!   /usr/local/bin or another directory of sh's default PATH. It removes
//!   `nofail`, `user`, `_netdev` and the like, and adds `dev,suid` for
//!   root (`nodev,nosuid` for others).
//! - mount(8) itself runs `/sbin/mount.fuse.lsfs` (or `/sbin/mount.lsfs`
//!   for `-t lsfs`) if it exists, as `SOURCE MOUNTPOINT [-sfnv] [-N NS]
//!   [-o OPTIONS] [-t TYPE]`; those are links to `lsfs`, recognised by the
//!   name they were run under.
//!
//! Either way the helper must return once the file system is mounted, so
//! it mounts as `lsfs mount --background` does (the server logs to
//! `.<name>.lsfs.log` beside the mount point). Exit codes follow mount(8):
//! 1 for a wrong invocation or option, 32 for a mount that failed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::mount_opts::MountOpts;

/// A mount asked for in mount(8)'s helper convention.
#[derive(Debug, PartialEq, Eq)]
pub struct HelperMount {
    pub image: PathBuf,
    pub mountpoint: PathBuf,
    pub options: MountOpts,
    /// `-f`: check everything, mount nothing.
    pub fake: bool,
    /// `-v`: say what was mounted.
    pub verbose: bool,
}

/// Exit code of mount(8) for a wrong invocation.
pub const EXIT_USAGE: u8 = 1;
/// Exit code of mount(8) for a mount that failed.
pub const EXIT_MOUNT_FAILED: u8 = 32;

/// Whether `argv` is a helper call: run as `mount.lsfs`, `mount.fuse.lsfs`
/// or `mount.fuseblk.lsfs`, or as `lsfs SOURCE DIR …` where SOURCE exists
/// and is no subcommand (so `lsfs mout x` stays clap's usage error).
pub fn is_helper_call(argv: &[OsString], subcommands: &[&str]) -> bool {
    let name = argv
        .first()
        .map(|a| {
            Path::new(a)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        })
        .unwrap_or_default();
    if name.starts_with("mount.") {
        return true;
    }
    match argv.get(1).and_then(|a| a.to_str()) {
        Some(first) => {
            argv.len() >= 3
                && !first.starts_with('-')
                && !subcommands.contains(&first)
                && Path::new(first).exists()
        }
        None => false,
    }
}

/// Parse a helper call's arguments (after argv[0]).
pub fn parse(args: &[OsString]) -> Result<HelperMount, String> {
    let mut positional: Vec<PathBuf> = Vec::new();
    let (mut options, mut fstype) = (Vec::<String>::new(), None::<String>);
    let (mut sloppy, mut fake, mut verbose) = (false, false, false);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy();
        let Some(flags) = s.strip_prefix('-').filter(|f| !f.is_empty()) else {
            positional.push(PathBuf::from(arg));
            continue;
        };
        // Short flags may be grouped (`-sv`); one that takes a value
        // takes the rest of the word or the next argument (`-oro`, `-o ro`).
        for (i, c) in flags.char_indices() {
            let rest = &flags[i + c.len_utf8()..];
            let mut value = || -> Result<String, String> {
                if !rest.is_empty() {
                    return Ok(rest.to_string());
                }
                it.next()
                    .map(|v| v.to_string_lossy().into_owned())
                    .ok_or_else(|| format!("option -{c} needs a value"))
            };
            match c {
                'o' => {
                    options.push(value()?);
                    break;
                }
                't' => {
                    fstype = Some(value()?);
                    break;
                }
                'N' => return Err("-N (mount namespaces) is not supported".into()),
                's' => sloppy = true,
                'f' => fake = true,
                'v' => verbose = true,
                // No /etc/mtab to write; read-write is the default.
                'n' | 'w' => {}
                'r' => options.push("ro".into()),
                _ => {
                    return Err(format!(
                        "unknown flag -{c} (usage: SOURCE DIR [-sfnv] [-o OPTIONS])"
                    ))
                }
            }
        }
    }
    if let Some(t) = &fstype {
        if !matches!(t.as_str(), "lsfs" | "fuse.lsfs" | "fuseblk.lsfs") {
            return Err(format!("file system type '{t}' is not lsfs"));
        }
    }
    let [image, mountpoint]: [PathBuf; 2] = positional.try_into().map_err(|p: Vec<PathBuf>| {
        format!(
            "expected SOURCE and MOUNTPOINT, got {} argument(s) (usage: SOURCE DIR [-sfnv] [-o OPTIONS])",
            p.len()
        )
    })?;
    let options = MountOpts::parse(&options.join(","), sloppy)?;
    Ok(HelperMount {
        image,
        mountpoint,
        options,
        fake,
        verbose,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn recognised_by_name_or_by_shape() {
        let subs = ["mount", "mkfs"];
        assert!(is_helper_call(
            &args(&["/sbin/mount.fuse.lsfs", "a", "b"]),
            &subs
        ));
        assert!(is_helper_call(&args(&["mount.lsfs"]), &subs));
        // mount.fuse3's call: an existing source first.
        assert!(is_helper_call(
            &args(&["lsfs", "/", "/tmp", "-o", "rw"]),
            &subs
        ));
        assert!(!is_helper_call(
            &args(&["lsfs", "mount", "/", "/tmp"]),
            &subs
        ));
        assert!(!is_helper_call(
            &args(&["lsfs", "/no/such/image", "/tmp"]),
            &subs
        ));
        assert!(!is_helper_call(&args(&["lsfs", "--help"]), &subs));
        assert!(!is_helper_call(&args(&["lsfs", "/"]), &subs));
    }

    #[test]
    fn mount8_and_mount_fuse3_calls() {
        // What mount(8) gives /sbin/mount.fuse.lsfs for a `user,nofail` line.
        let h = parse(&args(&[
            "/i",
            "/m",
            "-o",
            "ro,noexec,nosuid,nodev,checkpoint=3,nofail,user,_netdev",
            "-t",
            "fuse.lsfs",
        ]))
        .unwrap();
        assert_eq!(
            (h.image.as_path(), h.mountpoint.as_path()),
            (Path::new("/i"), Path::new("/m"))
        );
        assert!(h.options.read_only && !h.fake);
        assert_eq!(h.options.checkpoint, Some(3));
        assert_eq!(
            h.options.kernel_flags,
            libc::MS_NOEXEC | libc::MS_NOSUID | libc::MS_NODEV
        );
        // What mount.fuse3 runs for root.
        let h = parse(&args(&["/i", "/m", "-o", "rw,dev,suid"])).unwrap();
        assert!(!h.options.read_only && h.options.kernel_flags == 0);
        let h = parse(&args(&["-sfv", "/i", "-oro,bogus", "/m"])).unwrap();
        assert!(h.fake && h.verbose && h.options.read_only);
    }

    #[test]
    fn wrong_calls_name_what_is_wrong() {
        for (a, says) in [
            (
                &["/i", "/m", "-o", "rw,bogus"][..],
                "unknown mount option 'bogus'",
            ),
            (&["/i", "/m", "-t", "ext4"][..], "'ext4' is not lsfs"),
            (&["/i"][..], "got 1 argument"),
            (&["/i", "/m", "-o"][..], "-o needs a value"),
            (&["/i", "/m", "-x"][..], "unknown flag -x"),
            (&["/i", "/m", "-N", "1"][..], "not supported"),
        ] {
            let e = parse(&args(a)).unwrap_err();
            assert!(e.contains(says), "{a:?}: {e}");
        }
    }
}
