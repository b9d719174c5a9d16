//! Workload generators. [`kang`] synthesises before-cache page traces shaped like the four
//! traces of Kang's Table 2-2 (the originals are not public).

pub mod kang;
