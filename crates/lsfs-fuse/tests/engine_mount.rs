//! The POSIX cases of `common/cases.rs`, through a real mount of the lsfs
//! engine on an in-memory device.

mod common;

use common::engine;

posix_suite!(engine);

/// lseek's SEEK_DATA and SEEK_HOLE reach the engine through FUSE: a file
/// with data at 0 and at 1 MiB has a hole between them (`MemFs` would say
/// it is all data, which POSIX allows; the engine knows its holes).
#[test]
fn seek_data_and_hole_through_the_mount() {
    use std::os::unix::io::AsRawFd;
    if !common::fuse_available() {
        return;
    }
    let mount = common::TestMount::new(engine());
    let path = mount.root().join("sparse");
    let f = std::fs::File::create(&path).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[1; 4096], 0).unwrap();
    f.write_all_at(&[2; 4096], 1 << 20).unwrap();
    let size = (1 << 20) + 4096;
    let seek = |off: i64, whence: i32| {
        // SAFETY: lseek on a descriptor we own.
        let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
        if r < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap())
        } else {
            Ok(r)
        }
    };
    assert_eq!(seek(0, libc::SEEK_HOLE), Ok(4096));
    assert_eq!(seek(4096, libc::SEEK_DATA), Ok(1 << 20));
    assert_eq!(seek(1 << 20, libc::SEEK_HOLE), Ok(size));
    assert_eq!(seek(size, libc::SEEK_DATA), Err(libc::ENXIO));
    drop(f);
    mount.unmount();
}
