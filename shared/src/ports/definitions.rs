//! Pushed campaign definitions (docs/campaigns.md, "Where definitions live"): each push of a
//! definition's files stores a new, immutable version (1, 2, ...) unless its content is the
//! latest's. `mailctl campaign push` writes; a run reads the version it pinned, once per
//! environment (`DefinitionCache`: a version never changes).

use crate::domain::definition::Files;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// DynamoDB's limit on one item (names and values), which a version's item must fit in.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Pushes that lose the race for the next version number to another push are tried again
/// this many times in all (each loser reads the new head first).
pub const PUSH_ATTEMPTS: u32 = 5;
/// What a stored version may inflate to: far over any definition (300 KiB), far under a
/// function's memory.
const MAX_INFLATED_BYTES: usize = 8 << 20;

/// One stored version, without its files (or a definition's latest, read from its head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub name: String,
    pub version: u32,
    /// `content_hash` of its files: lowercase hex.
    pub sha256: String,
    pub pushed_at_ms: u64,
    /// Who pushed it, when the pusher said (`$USER`).
    pub pushed_by: Option<String>,
    /// Its `schedule` expression, if it has one (the recurring schedule follows the latest).
    pub schedule: Option<String>,
}

/// A version with its files, exactly as pushed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDefinition {
    pub info: VersionInfo,
    pub files: Files,
}

/// What a push stores.
#[derive(Clone, Copy, Debug)]
pub struct Push<'a> {
    /// The definition's `name` (campaign.toml): `[a-z0-9-]{1,40}`.
    pub name: &'a str,
    pub files: &'a Files,
    pub schedule: Option<&'a str>,
    pub at_ms: u64,
    pub by: Option<&'a str>,
}

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// A new version, now the latest.
    Stored(VersionInfo),
    /// The files hash to the latest's: nothing stored; the latest as it is.
    Unchanged(VersionInfo),
}

impl Pushed {
    pub fn info(&self) -> &VersionInfo {
        match self {
            Self::Stored(info) | Self::Unchanged(info) => info,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    #[error("definition name {0:?} is not 1-40 of [a-z0-9-]: set `name` in campaign.toml")]
    BadName(String),
    #[error("no definition {0:?} was pushed: push its folder with `mailctl campaign push DIR`")]
    Unknown(String),
    #[error(
        "definition {name} has no version {version} (its latest is {latest}): `mailctl campaign show {name}` lists its versions"
    )]
    NoVersion {
        name: String,
        version: u32,
        latest: u32,
    },
    #[error(
        "definition {name}: its files take {bytes} bytes deflated, over the {limit} bytes of one DynamoDB item: make its templates or samples smaller (nothing was stored)"
    )]
    TooBig {
        name: String,
        bytes: usize,
        limit: usize,
    },
    #[error(
        "definition {name}: {attempts} attempts lost the next version number to pushes at the same time: push again (nothing was stored)"
    )]
    Contended { name: String, attempts: u32 },
    #[error(
        "definition {name} version {version} cannot be read ({why}): push the folder again, which stores a new version"
    )]
    Corrupt {
        name: String,
        version: u32,
        why: String,
    },
    #[error(
        "definition {name} version {version} is refused by the functions' build: {first}. Check it with the `mailctl` of this build and push it again"
    )]
    Refused {
        name: String,
        version: u32,
        first: String,
    },
    /// The store did not answer, or answered with an error (a line that names it).
    #[error("{0}")]
    Store(String),
}

/// The definitions pushed to a stack.
pub trait DefinitionStore: Send + Sync {
    /// Stores `push.files` as the next version of `push.name`, or nothing when they hash to
    /// the latest's. Two pushes at once never get the same version.
    fn push(&self, push: Push<'_>) -> impl Future<Output = Result<Pushed, DefinitionError>> + Send;
    /// One version with its files (checked against its hash).
    fn get(
        &self,
        name: &str,
        version: u32,
    ) -> impl Future<Output = Result<StoredDefinition, DefinitionError>> + Send;
    /// The latest version (None: never pushed).
    fn latest(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<VersionInfo>, DefinitionError>> + Send;
    /// Every definition's latest version, by name.
    fn list(&self) -> impl Future<Output = Result<Vec<VersionInfo>, DefinitionError>> + Send;
    /// Every version of one definition, oldest first (empty: never pushed).
    fn versions(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<VersionInfo>, DefinitionError>> + Send;
}

/// `[a-z0-9-]{1,40}`, as campaign.toml's `name`; checked again here since it becomes a key.
pub fn check_name(name: &str) -> Result<(), DefinitionError> {
    let ok = (1..=40).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(DefinitionError::BadName(name.to_owned()))
    }
}

/// sha256 over the files in path order, each path and content length-prefixed (no two sets
/// of files frame to the same bytes), as lowercase hex.
pub fn content_hash(files: &Files) -> String {
    let mut hash = Sha256::new();
    for (path, content) in files {
        for part in [path.as_bytes(), content.as_bytes()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The files as stored: their JSON (paths sorted), deflated.
pub fn pack(files: &Files) -> Vec<u8> {
    let json = serde_json::to_vec(files).unwrap_or_default();
    miniz_oxide::deflate::compress_to_vec(&json, 9)
}

/// `pack`'s files back, refused when they are not what `sha256` says.
pub fn unpack(bytes: &[u8], sha256: &str) -> Result<Files, String> {
    let json = miniz_oxide::inflate::decompress_to_vec_with_limit(bytes, MAX_INFLATED_BYTES)
        .map_err(|e| format!("not deflated data: {e:?}"))?;
    let files: Files =
        serde_json::from_slice(&json).map_err(|e| format!("not a files map: {e}"))?;
    let actual = content_hash(&files);
    if actual != sha256 {
        return Err(format!("its files hash to {actual}, not {sha256}"));
    }
    Ok(files)
}

/// The store with each version read once: versions never change, so what was read stays
/// right for the environment's life. Bounded: a function reads one or two definitions.
pub struct DefinitionCache<S> {
    pub store: S,
    read: Mutex<HashMap<(String, u32), Arc<StoredDefinition>>>,
    loaded: Mutex<HashMap<(String, u32), Arc<LoadedDefinition>>>,
}

/// Versions kept; past that the cache starts over (a function never gets near it).
const CACHED_VERSIONS: usize = 16;

impl<S: DefinitionStore> DefinitionCache<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            read: Mutex::default(),
            loaded: Mutex::default(),
        }
    }

    /// The version, read from the store the first time only.
    pub async fn get(
        &self,
        name: &str,
        version: u32,
    ) -> Result<Arc<StoredDefinition>, DefinitionError> {
        let key = (name.to_owned(), version);
        if let Some(hit) = crate::runtime::lock(&self.read).get(&key) {
            return Ok(hit.clone());
        }
        let stored = Arc::new(self.store.get(name, version).await?);
        let mut read = crate::runtime::lock(&self.read);
        if read.len() >= CACHED_VERSIONS {
            read.clear();
        }
        Ok(read.entry(key).or_insert(stored).clone())
    }
}

/// A pushed version parsed and its templates compiled, as a function runs it.
pub struct LoadedDefinition {
    pub info: VersionInfo,
    pub definition: crate::domain::definition::Definition,
    pub templates: crate::domain::definition::render::DefinitionTemplates,
    /// Its files, samples included (an experiment's subjects are rendered against them).
    pub files: crate::domain::definition::Files,
}

impl LoadedDefinition {
    /// `files` parsed and their templates compiled (Err: every problem, one line each).
    pub fn compile(
        info: VersionInfo,
        files: crate::domain::definition::Files,
    ) -> Result<Self, Vec<String>> {
        let definition = crate::domain::definition::Definition::load(&files)?;
        let templates = crate::domain::definition::render::DefinitionTemplates::new(&definition)?;
        Ok(Self {
            info,
            definition,
            templates,
            files,
        })
    }

    /// The digest the functions' build carries (`domain::definition::bundled`), compiled
    /// once per environment: what a campaign that pins no definition runs.
    pub fn bundled() -> Result<Arc<Self>, DefinitionError> {
        use crate::domain::definition::bundled;
        static BUNDLED: std::sync::OnceLock<Result<Arc<LoadedDefinition>, String>> =
            std::sync::OnceLock::new();
        let compiled = BUNDLED.get_or_init(|| {
            let files = bundled::files();
            let info = VersionInfo {
                name: bundled::NAME.to_owned(),
                version: bundled::VERSION,
                sha256: content_hash(&files),
                pushed_at_ms: 0,
                pushed_by: None,
                schedule: None,
            };
            // Its samples render in every language too: a template that compiles but cannot
            // render stops the cold start, not a campaign.
            let loaded = Self::compile(info, files).map_err(|errors| errors.join("; "))?;
            let problems =
                crate::domain::definition::render::check_samples(&loaded.definition, &loaded.files);
            match problems.is_empty() {
                true => Ok(Arc::new(loaded)),
                false => Err(problems.join("; ")),
            }
        });
        compiled.clone().map_err(|first| DefinitionError::Refused {
            name: bundled::NAME.to_owned(),
            version: bundled::VERSION,
            first,
        })
    }
}

/// The version a run pinned, or the bundled digest when it pinned none.
pub async fn load_pinned(
    loader: &dyn DefinitionLoader,
    pinned: Option<&crate::domain::definition::pin::PinnedDefinition>,
) -> Result<Arc<LoadedDefinition>, DefinitionError> {
    match pinned {
        Some(pinned) => loader.load(&pinned.name, pinned.version).await,
        None => LoadedDefinition::bundled(),
    }
}

impl<S: DefinitionStore> DefinitionCache<S> {
    /// The version parsed and compiled, once per environment. A version this build refuses
    /// (it was checked by the `mailctl` that pushed it, which may differ from the
    /// functions' build) is `Refused`, with its first error: the same every time.
    pub async fn load(
        &self,
        name: &str,
        version: u32,
    ) -> Result<Arc<LoadedDefinition>, DefinitionError> {
        let key = (name.to_owned(), version);
        if let Some(hit) = crate::runtime::lock(&self.loaded).get(&key) {
            return Ok(hit.clone());
        }
        let stored = self.get(name, version).await?;
        let loaded = LoadedDefinition::compile(stored.info.clone(), stored.files.clone()).map_err(
            |errors| DefinitionError::Refused {
                name: name.to_owned(),
                version,
                first: errors.into_iter().next().unwrap_or_default(),
            },
        )?;
        let loaded = Arc::new(loaded);
        let mut cached = crate::runtime::lock(&self.loaded);
        if cached.len() >= CACHED_VERSIONS {
            cached.clear();
        }
        Ok(cached.entry(key).or_insert(loaded).clone())
    }
}

/// What a stage reads of the pushed definitions, object-safe so that a stage holds one
/// without a type parameter: a version parsed (`DefinitionCache::load`), and a
/// definition's latest.
pub trait DefinitionLoader: Send + Sync {
    fn load<'a>(
        &'a self,
        name: &'a str,
        version: u32,
    ) -> futures::future::BoxFuture<'a, Result<Arc<LoadedDefinition>, DefinitionError>>;
    fn latest<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<VersionInfo>, DefinitionError>>;
}

impl<S: DefinitionStore + 'static> DefinitionLoader for DefinitionCache<S> {
    fn load<'a>(
        &'a self,
        name: &'a str,
        version: u32,
    ) -> futures::future::BoxFuture<'a, Result<Arc<LoadedDefinition>, DefinitionError>> {
        Box::pin(DefinitionCache::load(self, name, version))
    }

    fn latest<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<VersionInfo>, DefinitionError>> {
        Box::pin(self.store.latest(name))
    }
}

/// The loader of a stage given no definitions store: every definition is unknown.
pub struct NoDefinitionStore;

impl DefinitionLoader for NoDefinitionStore {
    fn load<'a>(
        &'a self,
        name: &'a str,
        _version: u32,
    ) -> futures::future::BoxFuture<'a, Result<Arc<LoadedDefinition>, DefinitionError>> {
        Box::pin(async move { Err(DefinitionError::Unknown(name.to_owned())) })
    }

    fn latest<'a>(
        &'a self,
        _name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<VersionInfo>, DefinitionError>> {
        Box::pin(async { Ok(None) })
    }
}
