//! Checks a mount point before mounting, so that mistakes give an error that
//! names the path and the problem instead of a bare errno from mount(2).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn error(kind: io::ErrorKind, path: &Path, problem: &str) -> io::Error {
    io::Error::new(kind, format!("mount point {}: {problem}", path.display()))
}

/// The mount point must be an existing, empty directory that nothing is
/// mounted on yet.
pub(crate) fn check(path: &Path) -> io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(error(io::ErrorKind::NotFound, path, "does not exist"));
        }
        // A FUSE server that died without unmounting leaves this behind.
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(error(
                io::ErrorKind::Other,
                path,
                "is a disconnected FUSE mount (run `fusermount3 -u` on it first)",
            ));
        }
        Err(e) => return Err(error(e.kind(), path, &format!("cannot be examined: {e}"))),
    };
    if !meta.is_dir() {
        return Err(error(
            io::ErrorKind::InvalidInput,
            path,
            "is not a directory",
        ));
    }
    if is_mount_point(path, &meta)? {
        return Err(error(
            io::ErrorKind::AlreadyExists,
            path,
            "is already a mount point",
        ));
    }
    let mut entries = std::fs::read_dir(path)
        .map_err(|e| error(e.kind(), path, &format!("cannot be listed: {e}")))?;
    if entries.next().is_some() {
        return Err(error(
            io::ErrorKind::InvalidInput,
            path,
            "is not an empty directory",
        ));
    }
    Ok(())
}

/// A directory is a mount point when its parent lies on another device, or
/// when it is its own parent (`/`).
fn is_mount_point(path: &Path, meta: &std::fs::Metadata) -> io::Result<bool> {
    let parent = std::fs::metadata(path.join("..")).map_err(|e| {
        error(
            e.kind(),
            path,
            &format!("its parent cannot be examined: {e}"),
        )
    })?;
    Ok(parent.dev() != meta.dev() || parent.ino() == meta.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: io::Result<()>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn rejects_bad_mount_points_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        let m = message(check(&missing));
        assert!(
            m.contains(&*missing.to_string_lossy()) && m.contains("does not exist"),
            "{m}"
        );

        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(message(check(&file)).contains("is not a directory"));

        let full = tmp.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("x"), b"x").unwrap();
        assert!(message(check(&full)).contains("is not an empty directory"));

        assert!(message(check(Path::new("/"))).contains("is already a mount point"));
        assert!(message(check(Path::new("/proc"))).contains("is already a mount point"));

        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        check(&empty).unwrap();
    }
}
