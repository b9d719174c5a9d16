//! Clearing setuid and setgid bits, which the kernel hands to us
//! (`FUSE_HANDLE_KILLPRIV_V2`).
//!
//! Without that flag the kernel clears the bits itself, and to learn
//! whether a file has anything to clear it asks for `security.capability`
//! before every write: one GETXATTR round trip per write (48,189 for 56,195
//! writes in postmark, PERFORMANCE.md). With it the kernel marks a file
//! found clean (`S_NOSEC`) and stops asking, and the server clears the bits:
//!
//! - on a write by a caller without `CAP_FSETID` (the request carries
//!   `FUSE_WRITE_KILL_SUIDGID`);
//! - on a truncate by such a caller (the kernel says so in a setattr bit
//!   fuser does not pass on, so we go by the caller: anyone but root);
//! - on every chown of a non-directory, whoever asks.
//!
//! The rule is the kernel's own (`setattr_should_drop_suidgid`): setuid
//! always; setgid only together with group execute, since setgid without
//! it marks a file for mandatory locking rather than privilege. Capability
//! xattrs stay the kernel's: it still removes `security.capability` itself
//! (`file_remove_privs`) on the first write after any change to a
//! `security.*` attribute clears `S_NOSEC`.

use lsfs_vfs::{FileKind, Ino, SetAttr, Vfs, VfsResult};

/// The permission bits without the privileges a write, truncate or chown
/// drops, or `None` if there is nothing to drop.
pub(crate) fn dropped(perm: u16) -> Option<u32> {
    let mut p = perm as u32;
    p &= !libc::S_ISUID;
    if p & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        p &= !libc::S_ISGID;
    }
    (p != perm as u32).then_some(p)
}

/// Add to `set` the mode change that drops file `ino`'s privileges, if it
/// is not a directory, has any, and `set` does not set the mode already.
pub(crate) fn drop_in<V: Vfs>(v: &mut V, ino: Ino, set: &mut SetAttr) -> VfsResult<()> {
    if set.mode.is_some() {
        return Ok(());
    }
    let a = v.getattr(ino)?;
    if a.kind != FileKind::Dir {
        set.mode = dropped(a.perm);
    }
    Ok(())
}

/// Drop file `ino`'s privileges now (before a write).
pub(crate) fn drop_now<V: Vfs>(v: &mut V, ino: Ino) -> VfsResult<()> {
    let mut set = SetAttr::default();
    drop_in(v, ino, &mut set)?;
    if set.mode.is_some() {
        v.setattr(ino, &set)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dropped;

    #[test]
    fn setuid_always_goes_and_setgid_only_with_group_execute() {
        assert_eq!(dropped(0o4755), Some(0o755));
        assert_eq!(dropped(0o2755), Some(0o755));
        assert_eq!(dropped(0o6755), Some(0o755));
        // Setgid without group execute is mandatory locking: kept.
        assert_eq!(dropped(0o2745), None);
        assert_eq!(dropped(0o6745), Some(0o2745));
        assert_eq!(dropped(0o1777), None);
        assert_eq!(dropped(0o644), None);
    }
}
