//! Where a file system lives, as the commands name it: an image file or a
//! block device by its path, or an object store by URL (`s3://BUCKET/PREFIX`,
//! `file:///DIR`; docs/OBJECT_STORE.md).

use lsfs_core::device::{BlockDevice, FileDevice};
use lsfs_object::layout::Geometry;
use lsfs_object::{is_object_url, DiskCacheConfig, ObjectDevice, Target, WalConfig};
use std::path::Path;

/// The object-store URL `image` spells, if it is one.
pub fn object_url(image: &Path) -> Option<&str> {
    image.to_str().filter(|s| is_object_url(s))
}

/// Open the device `image` names; `writable` takes an object store's lease.
pub fn open(image: &Path, writable: bool) -> Result<Box<dyn BlockDevice>, String> {
    open_cached(
        image,
        writable,
        lsfs_object::device::DEFAULT_CACHE_BYTES,
        None,
        None,
        lsfs_object::device::DEFAULT_READAHEAD_SEGMENTS,
    )
}

/// [`open`], with the bound on an object store's objects kept in memory,
/// its write-ahead file and its cache on disk, if any (an image file
/// refuses those), and the segments a read-only open fetches ahead.
pub fn open_cached(
    image: &Path,
    writable: bool,
    object_cache_bytes: u64,
    wal: Option<&WalConfig>,
    disk: Option<&DiskCacheConfig>,
    readahead: u64,
) -> Result<Box<dyn BlockDevice>, String> {
    match object_url(image) {
        Some(url) => {
            let t = Target::parse(url)?;
            let dev = ObjectDevice::open_full(&t, writable, object_cache_bytes, wal, disk)?;
            dev.set_readahead(readahead);
            Ok(Box::new(dev))
        }
        None if wal.is_some() || disk.is_some() => Err(format!(
            "{}: {} is not an object store URL; it is for s3://, file:// and memory:// \
             file systems only",
            if wal.is_some() {
                "object_wal"
            } else {
                "object_disk_cache"
            },
            image.display()
        )),
        None => Ok(Box::new(
            FileDevice::open(image, writable).map_err(|e| e.to_string())?,
        )),
    }
}

/// Whether an object store already holds a file system at `url`.
pub fn object_holds_lsfs(url: &str) -> Result<bool, String> {
    ObjectDevice::exists(&Target::parse(url)?)
}

/// Lay out a new object-store device at `url` for a file system of `size`
/// bytes in segments of `segment_bytes`.
pub fn create_object(url: &str, size: u64, segment_bytes: u64, force: bool) -> Result<(), String> {
    let geo = Geometry {
        device_bytes: size / 4096 * 4096,
        segment_blocks: segment_bytes / 4096,
    };
    ObjectDevice::create(&Target::parse(url)?, geo, force)
}
