//! `iceberg::io::Storage` over `object_store`: one code path for `file://` and `s3://`
//! warehouses.
//!
//! iceberg-rust hands every path to the storage as a full URL. The storage keeps one
//! `ObjectStore` per (scheme, bucket), built on first use from the catalog's properties.
//! S3 properties may use Iceberg's names (`s3.endpoint`, `s3.access-key-id`,
//! `s3.secret-access-key`, `s3.region`, `s3.path-style-access`) or object_store's own
//! (`aws_endpoint`, ...); Iceberg's names win when both are present.
//!
//! Local files are fsynced when a writer closes, with their directory, because a commit
//! that names a data file must never outlive the file's bytes on a power loss.

use std::collections::HashMap;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

use parking_lot::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use url::Url;

/// Iceberg's S3 property names and the object_store keys they set.
const ICEBERG_S3_PROPS: &[(&str, &str)] = &[
    ("s3.endpoint", "aws_endpoint"),
    ("s3.access-key-id", "aws_access_key_id"),
    ("s3.secret-access-key", "aws_secret_access_key"),
    ("s3.session-token", "aws_session_token"),
    ("s3.region", "aws_region"),
    ("client.region", "aws_region"),
];

/// Builds [`ObjectStoreStorage`] from the catalog's properties.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ObjectStoreStorageFactory;

#[typetag::serde]
impl StorageFactory for ObjectStoreStorageFactory {
    fn build(&self, config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(ObjectStoreStorage::new(config.props().clone())))
    }
}

/// An `iceberg::io::Storage` that serves every path through `object_store`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStoreStorage {
    props: HashMap<String, String>,
    /// Stores built so far, keyed by `scheme://authority`. Rebuilt after deserialization.
    #[serde(skip)]
    stores: Arc<Mutex<HashMap<String, Arc<dyn ObjectStore>>>>,
}

/// A resolved path: the store that holds it, where in that store, and the local file
/// path when the store is the local file system.
struct Located {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    local: Option<std::path::PathBuf>,
}

impl ObjectStoreStorage {
    pub fn new(props: HashMap<String, String>) -> Self {
        Self {
            props,
            stores: Arc::default(),
        }
    }

    fn locate(&self, location: &str) -> Result<Located> {
        let url = if location.starts_with('/') {
            Url::from_file_path(location).map_err(|()| invalid(location, "not an absolute path"))?
        } else {
            Url::parse(location).map_err(|e| invalid(location, &e.to_string()))?
        };
        let key = format!("{}://{}", url.scheme(), url.authority());
        let path =
            ObjectPath::from_url_path(url.path()).map_err(|e| invalid(location, &e.to_string()))?;
        let local = (url.scheme() == "file")
            .then(|| url.to_file_path().ok())
            .flatten();
        let mut stores = self.stores.lock();
        let store = match stores.get(&key) {
            Some(store) => Arc::clone(store),
            None => {
                let store = self.build_store(&url)?;
                stores.insert(key, Arc::clone(&store));
                store
            }
        };
        Ok(Located { store, path, local })
    }

    fn build_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        match url.scheme() {
            "file" => Ok(Arc::new(LocalFileSystem::new())),
            "s3" | "s3a" => {
                let bucket = url
                    .host_str()
                    .ok_or_else(|| invalid(url.as_str(), "an s3 URL needs a bucket"))?;
                let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
                let mut options: HashMap<String, String> = HashMap::new();
                for (k, v) in &self.props {
                    if AmazonS3ConfigKey::from_str(k).is_ok() {
                        options.insert(k.clone(), v.clone());
                    }
                }
                for (iceberg_key, ours) in ICEBERG_S3_PROPS {
                    if let Some(v) = self.props.get(*iceberg_key) {
                        options.insert((*ours).to_owned(), v.clone());
                    }
                }
                if let Some(v) = self.props.get("s3.path-style-access") {
                    let path_style = v.eq_ignore_ascii_case("true");
                    options.insert(
                        "aws_virtual_hosted_style_request".into(),
                        (!path_style).to_string(),
                    );
                }
                if options
                    .get("aws_endpoint")
                    .is_some_and(|e| e.starts_with("http://"))
                {
                    options.insert("aws_allow_http".into(), "true".into());
                }
                for (k, v) in options {
                    let key = AmazonS3ConfigKey::from_str(&k)
                        .map_err(|e| invalid(url.as_str(), &e.to_string()))?;
                    builder = builder.with_config(key, v);
                }
                let store = builder.build().map_err(|e| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("cannot configure S3 storage for {url}: {e}"),
                    )
                })?;
                Ok(Arc::new(store))
            }
            other => Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!("warehouse scheme {other:?} is not supported: use file:// or s3://"),
            )),
        }
    }
}

/// One object found by [`ObjectStoreStorage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// The full URL, in the form iceberg-rust writes into metadata.
    pub location: String,
    pub size: u64,
    pub last_modified_ms: i64,
}

impl ObjectStoreStorage {
    /// Every object under `prefix` (a directory URL), recursively. iceberg's `Storage`
    /// has no listing; the purge needs one.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedFile>> {
        let at = self.locate(prefix)?;
        let url = if prefix.starts_with('/') {
            format!("file://{prefix}")
        } else {
            prefix.to_owned()
        };
        let parsed = Url::parse(&url).map_err(|e| invalid(prefix, &e.to_string()))?;
        let root = format!("{}://{}/", parsed.scheme(), parsed.authority());
        let mut listed = at.store.list(Some(&at.path));
        let mut out = Vec::new();
        while let Some(meta) = listed.next().await {
            match meta {
                Ok(meta) => out.push(ListedFile {
                    location: format!("{root}{}", meta.location),
                    size: meta.size,
                    last_modified_ms: meta.last_modified.timestamp_millis(),
                }),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(io_error("cannot list", prefix, e)),
            }
        }
        Ok(out)
    }
}

fn invalid(location: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::DataInvalid,
        format!("invalid storage location {location:?}: {why}"),
    )
}

fn io_error(what: &str, location: &str, e: impl std::fmt::Display) -> Error {
    let kind = ErrorKind::Unexpected;
    Error::new(kind, format!("{what} {location}: {e}"))
}

fn is_not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

/// Syncs a local file and its directory, so a commit naming it survives a power loss.
async fn sync_local(path: std::path::PathBuf) -> Result<()> {
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::File::open(&path)?.sync_all()?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })
    .await
    .map_err(|e| io_error("sync of", "a local file", e))?
    .map_err(|e| io_error("sync of", "a local file", e))
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStoreStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        let at = self.locate(path)?;
        match at.store.head(&at.path).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(io_error("cannot check", path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let at = self.locate(path)?;
        let meta = at
            .store
            .head(&at.path)
            .await
            .map_err(|e| io_error("cannot stat", path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let at = self.locate(path)?;
        let got = at
            .store
            .get(&at.path)
            .await
            .map_err(|e| io_error("cannot read", path, e))?;
        got.bytes()
            .await
            .map_err(|e| io_error("cannot read", path, e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        let at = self.locate(path)?;
        Ok(Box::new(ObjectRead {
            store: at.store,
            path: at.path,
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let mut writer = self.writer(path).await?;
        writer.write(bs).await?;
        writer.close().await
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let at = self.locate(path)?;
        Ok(Box::new(ObjectWrite {
            writer: Some(BufWriter::new(at.store, at.path)),
            location: path.to_owned(),
            local: at.local,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let at = self.locate(path)?;
        match at.store.delete(&at.path).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(io_error("cannot delete", path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let at = self.locate(path)?;
        let mut listed = at.store.list(Some(&at.path));
        while let Some(meta) = listed.next().await {
            match meta {
                Ok(meta) => match at.store.delete(&meta.location).await {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(io_error("cannot delete", meta.location.as_ref(), e)),
                },
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(io_error("cannot list", path, e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}

/// Ranged reads of one object.
#[derive(Debug)]
struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.path, range)
            .await
            .map_err(|e| io_error("cannot read", self.path.as_ref(), e))
    }
}

/// A buffered upload: one PUT for small files, multipart for large ones. Nothing is
/// visible at the path until `close` succeeds.
struct ObjectWrite {
    writer: Option<BufWriter>,
    location: String,
    local: Option<std::path::PathBuf>,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "write after close"))?;
        writer
            .put(bs)
            .await
            .map_err(|e| io_error("cannot write", &self.location, e))
    }

    async fn close(&mut self) -> Result<()> {
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "file closed twice"))?;
        writer
            .shutdown()
            .await
            .map_err(|e| io_error("cannot finish", &self.location, e))?;
        if let Some(local) = self.local.take() {
            sync_local(local).await?;
        }
        Ok(())
    }
}
