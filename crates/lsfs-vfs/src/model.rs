//! An in-memory reference file system: the model that tests compare lsfs with.
//! (Being written.)
