//! Whole images: patches to a small valid image (`fuzz/base-image.rle`, see
//! `lsfs_fuzz::ImageInput` for the input format), then a read-only mount, a
//! walk that reads every directory, file, symlink and xattr, and fsck; or
//! (flag 4) a read-write mount that changes, cleans and unmounts first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsfs_fuzz::{base, exercise_image, exercise_writable, ImageInput};

lsfs_fuzz::limit_allocations!();

fuzz_target!(|data: &[u8]| {
    let input = ImageInput::parse(data);
    let img = base().patched(&input);
    if input.writable {
        exercise_writable(img);
    } else {
        exercise_image(img, input.checkpoint);
    }
});
