//! An image file or a block device, through pread/pwrite/fdatasync.

use super::{check_range, BlockDevice, DeviceStats};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size_bytes: u64,
    stats: DeviceStats,
}

impl FileDevice {
    /// Open `path` and take an exclusive lock on it, so that two mounts (or a
    /// mount and fsck) never share one image.
    pub fn open(path: &Path, writable: bool) -> Result<FileDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        let lock = if writable {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), lock | libc::LOCK_NB) } != 0 {
            return Err(Error::io(
                format!(
                    "{} is in use (mounted, or open by another lsfs tool)",
                    path.display()
                ),
                std::io::Error::last_os_error(),
            ));
        }
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let size_bytes = if meta.file_type().is_block_device() {
            block_device_size(&file)
                .map_err(|e| Error::io(format!("size of {}", path.display()), e))?
        } else {
            meta.len()
        };
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            stats: DeviceStats::default(),
        })
    }

    /// Create (or truncate) a sparse image file of `size_bytes`.
    pub fn create_image(path: &Path, size_bytes: u64) -> Result<()> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
        file.set_len(size_bytes)
            .map_err(|e| Error::io(format!("cannot size {}", path.display()), e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn block_device_size(file: &File) -> std::io::Result<u64> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(size)
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(self.size_bytes, offset, buf.len(), "read")?;
        self.file.read_exact_at(buf, offset).map_err(|e| {
            Error::io(
                format!(
                    "read {} bytes at {} of {}",
                    buf.len(),
                    offset,
                    self.path.display()
                ),
                e,
            )
        })?;
        self.stats.note_read(buf.len());
        Ok(())
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<()> {
        check_range(self.size_bytes, offset, buf.len(), "write")?;
        self.file.write_all_at(buf, offset).map_err(|e| {
            Error::io(
                format!(
                    "write {} bytes at {} of {}",
                    buf.len(),
                    offset,
                    self.path.display()
                ),
                e,
            )
        })?;
        self.stats.note_write(buf.len());
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(format!("flush {}", self.path.display()), e))?;
        self.stats.note_flush();
        Ok(())
    }

    fn stats(&self) -> &DeviceStats {
        &self.stats
    }
}
