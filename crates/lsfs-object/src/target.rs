//! Which object store a URL names, and the prefix of the file system's
//! objects in it:
//! * `s3://BUCKET/PREFIX`: S3 or any S3-compatible store; endpoint,
//!   region and credentials come from the usual environment variables
//!   (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP` for a plain-HTTP endpoint
//!   such as a local MinIO), as the AWS tools read them; how long a failing
//!   request is retried from `LSFS_OBJECT_RETRIES` and
//!   `LSFS_OBJECT_RETRY_SECS` ([`retry_config`]);
//! * `file:///ABSOLUTE/DIR`: a local directory, one file per object (tests,
//!   and a bucket's contents copied to disk);
//! * `memory://NAME`: in the process's memory, for tests.

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, RetryConfig};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// Retries of a failing request to an S3 store, at most (`LSFS_OBJECT_RETRIES`).
pub const DEFAULT_RETRIES: usize = 10;
/// Seconds from a request's first try after which it is not retried again
/// (`LSFS_OBJECT_RETRY_SECS`). `object_store`'s own default is 180: a
/// FUSE request waits all that time for a store that is gone, and 60
/// still rides out a server's restart.
pub const DEFAULT_RETRY_SECS: f64 = 60.0;

/// How failing requests to an S3 store are retried (with `object_store`'s
/// exponential backoff, from 100 ms up to 15 s between tries): at most
/// `LSFS_OBJECT_RETRIES` times (default [`DEFAULT_RETRIES`]; 0: never),
/// and not after `LSFS_OBJECT_RETRY_SECS` seconds (default
/// [`DEFAULT_RETRY_SECS`]) from the first try. Then the request fails and
/// the file system sees a device error (EIO, and the mount turns
/// read-only), so a store that is gone stops a mount in bounded time: about
/// the retry time, plus the backoff sleep under way and one request's own
/// timeout (`AWS_TIMEOUT`, default 30 s; a timed-out PUT is not retried).
pub fn retry_config() -> Result<RetryConfig, String> {
    fn var<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .map_err(|_| format!("{name}={v:?}: not a number")),
            Err(_) => Ok(default),
        }
    }
    let max_retries = var("LSFS_OBJECT_RETRIES", DEFAULT_RETRIES)?;
    let secs: f64 = var("LSFS_OBJECT_RETRY_SECS", DEFAULT_RETRY_SECS)?;
    let retry_timeout = Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("LSFS_OBJECT_RETRY_SECS={secs}: not a number of seconds"))?;
    Ok(RetryConfig {
        max_retries,
        retry_timeout,
        ..Default::default()
    })
}

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
                        .with_retry(retry_config()?)
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

    #[test]
    fn retries_come_from_the_environment() {
        // One test sets the variables: tests run in threads of one process.
        std::env::remove_var("LSFS_OBJECT_RETRIES");
        std::env::remove_var("LSFS_OBJECT_RETRY_SECS");
        let c = retry_config().unwrap();
        assert_eq!(c.max_retries, DEFAULT_RETRIES);
        assert_eq!(c.retry_timeout, Duration::from_secs(60));
        std::env::set_var("LSFS_OBJECT_RETRIES", "2");
        std::env::set_var("LSFS_OBJECT_RETRY_SECS", "1.5");
        let c = retry_config().unwrap();
        assert_eq!(c.max_retries, 2);
        assert_eq!(c.retry_timeout, Duration::from_millis(1500));
        std::env::set_var("LSFS_OBJECT_RETRY_SECS", "-1");
        assert!(retry_config()
            .unwrap_err()
            .contains("LSFS_OBJECT_RETRY_SECS"));
        std::env::set_var("LSFS_OBJECT_RETRIES", "many");
        assert!(retry_config().unwrap_err().contains("LSFS_OBJECT_RETRIES"));
        std::env::remove_var("LSFS_OBJECT_RETRIES");
        std::env::remove_var("LSFS_OBJECT_RETRY_SECS");
    }
}
