//! The capacity tier: the object store that holds the whole database, named by a URL.
//!
//! | URL                         | store                                                  |
//! |-----------------------------|--------------------------------------------------------|
//! | `/abs/dir`, `rel/dir`       | `LocalFileSystem` rooted at the directory, fsync on,   |
//! |                             | with conditional overwrites (see `localdir.rs`)        |
//! | `file:///abs/dir`           | the same                                               |
//! | `s3://bucket[/prefix]`      | `AmazonS3` (MinIO or S3), optionally under a prefix    |
//! | `memory://`                 | `InMemory`, private to the process (unit tests only)   |
//!
//! S3 settings come from the standard `AWS_*` environment variables (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, ...) and can be overridden
//! through [`S3Options`]. Plain `http://` endpoints are accepted without further ado for
//! loopback hosts (a MinIO on the same machine); anything else needs `AWS_ALLOW_HTTP=true`.
//!
//! Retries are bounded ([`CapacityOptions::retry_timeout`]) so that an unreachable endpoint
//! yields an error in seconds rather than hanging for the client's default three minutes.

use std::fmt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::error::{Error, Result};

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A local directory (absolute after parsing).
    Local(PathBuf),
    /// An S3 bucket, with an optional key prefix (no leading or trailing `/`).
    S3 { bucket: String, prefix: String },
    /// A process-private in-memory store.
    Memory,
}

impl StoreUrl {
    /// Parses a store URL; see the module documentation for the accepted forms.
    pub fn parse(url: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if url.is_empty() {
            return Err(invalid(
                "it is empty; give a directory, file:///abs/path or s3://bucket/prefix",
            ));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            let path = FsPath::new(url);
            let abs = if path.is_absolute() {
                path.to_path_buf()
            } else {
                std::env::current_dir()
                    .map_err(|e| invalid(&format!("cannot resolve a relative path: {e}")))?
                    .join(path)
            };
            return Ok(StoreUrl::Local(lexically_normal(&abs)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let parsed = url::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
                let path = parsed
                    .to_file_path()
                    .map_err(|()| invalid("a file URL needs an absolute path: file:///abs/path"))?;
                Ok(StoreUrl::Local(path))
            }
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid("the bucket name is missing: s3://bucket/prefix"));
                }
                Ok(StoreUrl::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.trim_matches('/').to_string(),
                })
            }
            "memory" => Ok(StoreUrl::Memory),
            other => Err(invalid(&format!(
                "unknown scheme {other:?}; use a directory path, file:///abs/path, \
                 s3://bucket/prefix or memory://"
            ))),
        }
    }
}

/// `abs` without `.` and `..` components (`..` removes the component before it, as the
/// shell's `cd` does; symbolic links are not followed). Object-store paths have no such
/// components: kept, `./db` became a directory named `%2E` beside the one meant.
fn lexically_normal(abs: &FsPath) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Local(path) => write!(f, "file://{}", path.display()),
            StoreUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            StoreUrl::Memory => write!(f, "memory://"),
        }
    }
}

/// S3 settings that override the `AWS_*` environment.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub allow_http: Option<bool>,
}

/// How to open a capacity store.
#[derive(Debug, Clone)]
pub struct CapacityOptions {
    /// Create a missing local directory (for commands that write).
    pub create: bool,
    pub s3: S3Options,
    /// Total time a request may spend on retries before it fails.
    pub retry_timeout: Duration,
    /// Time allowed to establish a TCP connection.
    pub connect_timeout: Duration,
}

impl Default for CapacityOptions {
    fn default() -> Self {
        Self {
            create: false,
            s3: S3Options::default(),
            retry_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Opens the capacity store named by `url`.
pub fn open_capacity(url: &StoreUrl, options: &CapacityOptions) -> Result<Arc<dyn ObjectStore>> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(InMemory::new())),
        StoreUrl::Local(dir) => open_local(url, dir, options.create),
        StoreUrl::S3 { bucket, prefix } => open_s3(url, bucket, prefix, options),
    }
}

fn open_local(url: &StoreUrl, dir: &FsPath, create: bool) -> Result<Arc<dyn ObjectStore>> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Error::InvalidUrl {
                url: url.to_string(),
                reason: format!("{} is a file, not a directory", dir.display()),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("cannot create store directory", dir, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::InvalidUrl {
                url: url.to_string(),
                reason: format!("directory {} does not exist", dir.display()),
            });
        }
        Err(e) => return Err(Error::io("cannot access store directory", dir, e)),
    }
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|source| Error::Store {
            store: url.to_string(),
            source,
        })?
        .with_fsync(true)
        .with_automatic_cleanup(true);
    Ok(Arc::new(crate::localdir::LocalDirStore::new(
        dir.to_path_buf(),
        store,
    )))
}

fn open_s3(
    url: &StoreUrl,
    bucket: &str,
    prefix: &str,
    options: &CapacityOptions,
) -> Result<Arc<dyn ObjectStore>> {
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let s3 = &options.s3;
    let endpoint = s3
        .endpoint
        .clone()
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| env("AWS_ENDPOINT"));
    let has_key = s3.access_key_id.is_some() || env("AWS_ACCESS_KEY_ID").is_some();
    let has_secret = s3.secret_access_key.is_some() || env("AWS_SECRET_ACCESS_KEY").is_some();
    let other_credentials = [
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ]
    .iter()
    .any(|k| env(k).is_some());
    let skip_signature = env("AWS_SKIP_SIGNATURE").is_some_and(|v| v == "true");
    // Without static keys the client would fall back to the EC2 metadata service and stall on
    // any machine that is not an EC2 instance, so only allow that fallback explicitly.
    let imds = env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v == "false");
    if !(has_key && has_secret || other_credentials || skip_signature || imds) {
        return Err(Error::InvalidOption {
            option: "credentials",
            reason: format!(
                "no credentials for {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                 (or AWS_SKIP_SIGNATURE=true for a public bucket)"
            ),
        });
    }

    // reqwest's TLS takes the process's rustls provider: ring (see the workspace manifest).
    // Installing fails only when one is installed already, which serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Client options first: setting them replaces earlier client settings such as allow_http.
    let client = ClientOptions::new()
        .with_connect_timeout(options.connect_timeout)
        .with_timeout(Duration::from_secs(60))
        .with_allow_http(env("AWS_ALLOW_HTTP").is_some_and(|v| v == "true"));
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 4,
        retry_timeout: options.retry_timeout,
    };
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_client_options(client)
        .with_retry(retry);
    if let Some(endpoint) = &endpoint {
        let parsed = url::Url::parse(endpoint).map_err(|e| Error::InvalidOption {
            option: "endpoint",
            reason: format!("{endpoint:?} is not a URL ({e}); use e.g. http://127.0.0.1:9000"),
        })?;
        let loopback = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
        if parsed.scheme() == "http" && loopback {
            builder = builder.with_allow_http(true);
        }
        builder = builder
            .with_endpoint(endpoint.clone())
            // MinIO and most S3-compatible servers serve buckets under the path.
            .with_virtual_hosted_style_request(false);
    }
    if let Some(region) = s3.region.clone().or_else(|| env("AWS_REGION")) {
        builder = builder.with_region(region);
    } else if endpoint.is_some() {
        builder = builder.with_region("us-east-1");
    }
    if let Some(key) = &s3.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &s3.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(allow) = s3.allow_http {
        builder = builder.with_allow_http(allow);
    }
    let s3_store = builder.build().map_err(|source| Error::InvalidOption {
        option: "s3",
        reason: format!("cannot configure {url}: {source}"),
    })?;
    if prefix.is_empty() {
        Ok(Arc::new(s3_store))
    } else {
        Ok(Arc::new(PrefixStore::new(s3_store, Path::from(prefix))))
    }
}

/// Makes one cheap request so that a wrong endpoint, missing bucket or bad credentials are
/// reported when a store is opened, with advice, rather than at the first real request.
pub async fn check_reachable(url: &StoreUrl, store: &dyn ObjectStore) -> Result<()> {
    let mut listing = store.list(None);
    match listing.next().await {
        None | Some(Ok(_)) => Ok(()),
        Some(Err(source)) => Err(describe_store_error(url, source)),
    }
}

/// Turns a capacity store error into an error that says how to fix the usual causes.
pub fn describe_store_error(url: &StoreUrl, source: object_store::Error) -> Error {
    let text = format!("{source:?}");
    let advice = if text.contains("NoSuchBucket") {
        Some(
            "the bucket does not exist; create it first (for MinIO: mc mb, or the S3 CreateBucket call)",
        )
    } else if text.contains("InvalidAccessKeyId")
        || text.contains("SignatureDoesNotMatch")
        || matches!(source, object_store::Error::Unauthenticated { .. })
    {
        Some("the credentials were refused; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    } else if text.contains("AccessDenied")
        || matches!(source, object_store::Error::PermissionDenied { .. })
    {
        Some("access was denied; check the credentials' permissions on the bucket")
    } else if text.contains("Connect") || text.contains("connect") || text.contains("timed out") {
        Some("cannot connect; check AWS_ENDPOINT_URL and that the server is running")
    } else {
        None
    };
    match advice {
        Some(advice) => Error::InvalidOption {
            option: "store",
            reason: format!("{url}: {advice} ({source})"),
        },
        None => Error::Store {
            store: url.to_string(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form() {
        assert_eq!(
            StoreUrl::parse("/tmp/db").unwrap(),
            StoreUrl::Local("/tmp/db".into())
        );
        assert_eq!(
            StoreUrl::parse("file:///tmp/db").unwrap(),
            StoreUrl::Local("/tmp/db".into())
        );
        assert_eq!(
            StoreUrl::parse("s3://bucket/a/b/").unwrap(),
            StoreUrl::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        assert!(matches!(
            StoreUrl::parse("relative/dir").unwrap(),
            StoreUrl::Local(p) if p.is_absolute()
        ));
        // `.` and `..` are resolved: object-store paths cannot hold them.
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            StoreUrl::parse("./db").unwrap(),
            StoreUrl::Local(here.join("db"))
        );
        assert_eq!(
            StoreUrl::parse("/tmp/./a/../db/.").unwrap(),
            StoreUrl::Local("/tmp/db".into())
        );
    }

    #[test]
    fn rejects_unknown_scheme_with_advice() {
        let err = StoreUrl::parse("gs://bucket").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("unknown scheme \"gs\""), "{msg}");
        assert!(msg.contains("s3://bucket/prefix"), "{msg}");
        assert!(StoreUrl::parse("s3:///nobucket").is_err());
        assert!(StoreUrl::parse("").is_err());
    }

    #[test]
    fn missing_local_directory_is_an_error_unless_created() {
        let tmp = tempfile::tempdir().unwrap();
        let url = StoreUrl::Local(tmp.path().join("absent"));
        let err = open_capacity(&url, &CapacityOptions::default()).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!tmp.path().join("absent").exists());
        let options = CapacityOptions {
            create: true,
            ..Default::default()
        };
        open_capacity(&url, &options).unwrap();
        assert!(tmp.path().join("absent").is_dir());
    }
}
