//! The POSIX cases of `common/cases.rs`, through a real mount of `MemFs`.

mod common;

posix_suite!(lsfs_vfs::model::MemFs::new);
