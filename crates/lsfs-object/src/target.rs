//! Which object store a URL names, and the prefix of the file system's
//! objects in it:
//! * `s3://BUCKET/PREFIX`: S3 or any S3-compatible store; endpoint,
//!   region and credentials come from the usual environment variables
//!   (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP` for a plain-HTTP endpoint
//!   such as a local MinIO), as the AWS tools read them;
//! * `file:///ABSOLUTE/DIR`: a local directory, one file per object (tests,
//!   and a bucket's contents copied to disk);
//! * `memory://NAME`: in the process's memory, for tests.

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use std::sync::Arc;
use url::Url;

/// A store and the prefix of one file system's objects in it.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
}

/// Whether `s` names an object store rather than an image file or device.
pub fn is_object_url(s: &str) -> bool {
    ["s3://", "file://", "memory://"]
        .iter()
        .any(|p| s.starts_with(p))
}

impl Target {
    /// Parse `url` (see the module comment).
    pub fn parse(url: &str) -> Result<Target, String> {
        let u = Url::parse(url).map_err(|e| format!("{url}: not a URL: {e}"))?;
        let prefix = Path::from(u.path().trim_matches('/'));
        let store: Arc<dyn ObjectStore> = match u.scheme() {
            "s3" => {
                let bucket = u
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| format!("{url}: no bucket (s3://BUCKET/PREFIX)"))?;
                Arc::new(
                    AmazonS3Builder::from_env()
                        .with_bucket_name(bucket)
                        .build()
                        .map_err(|e| format!("{url}: {e}"))?,
                )
            }
            "file" => {
                if u.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(format!(
                        "{url}: a file URL has no host: file:///ABSOLUTE/DIR"
                    ));
                }
                Arc::new(LocalFileSystem::new())
            }
            "memory" => Arc::new(InMemory::new()),
            s => {
                return Err(format!(
                    "{url}: unknown scheme {s:?}: s3://, file:// or memory://"
                ))
            }
        };
        Ok(Target {
            url: url.to_string(),
            store,
            prefix,
        })
    }

    /// A target on `store` under `prefix` (tests, and a store built by hand).
    pub fn on(store: Arc<dyn ObjectStore>, prefix: &str) -> Target {
        Target {
            url: format!("(store)/{prefix}"),
            store,
            prefix: Path::from(prefix),
        }
    }

    /// The full path of object `name` of this file system.
    pub fn path(&self, name: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in name.split('/') {
            p = p.child(part);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_store_and_prefix() {
        let t = Target::parse("file:///tmp/lsfs-x/fs1").unwrap();
        assert_eq!(t.path("seg/3").as_ref(), "tmp/lsfs-x/fs1/seg/3");
        let t = Target::parse("memory://m/a/b/").unwrap();
        assert_eq!(t.path("super-a").as_ref(), "a/b/super-a");
        assert!(Target::parse("ftp://x/y")
            .unwrap_err()
            .contains("unknown scheme"));
        assert!(Target::parse("s3:///p").unwrap_err().contains("no bucket"));
        assert!(is_object_url("s3://b/p") && !is_object_url("/var/tmp/img"));
    }
}
