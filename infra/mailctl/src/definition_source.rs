//! The campaign definition a command renders or plans with: a pushed one (its latest or a
//! named version, read from the stack's store as the functions read it) or a folder on disk,
//! checked as `mailctl campaign check` checks it and served to CreateEmails as version 0,
//! nothing pushed (`Folder`). `preview`, `test-send` and `plan` use it.

use anyhow::{anyhow, Result};
use mailflow::adapters::definitions::DefinitionsTable;
use mailflow::domain::definition::pin::PinnedDefinition;
use mailflow::domain::definition::render::DefinitionTemplates;
use mailflow::ports::definitions::{
    content_hash, DefinitionCache, DefinitionLoader, LoadedDefinition, VersionInfo,
};
use mailflow::ports::{DefinitionError, DefinitionStore};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

/// The version a folder on disk is served as: never one a push stores (they start at 1).
pub const FOLDER_VERSION: u32 = 0;

/// Where `--definition` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A pushed definition's name, and the version asked for (None: the latest).
    Pushed { name: String, version: Option<u32> },
    /// A folder on disk (not pushed).
    Folder(PathBuf),
}

impl Source {
    /// A value with a `/` or a leading `.` is a folder (a definition's name is `[a-z0-9-]`);
    /// anything else names a pushed definition.
    pub fn parse(raw: &str, version: Option<u32>) -> Result<Self> {
        if raw.contains('/') || raw.starts_with('.') {
            if version.is_some() {
                anyhow::bail!(
                    "--definition-version goes with a pushed definition's name, not a folder ({raw})"
                );
            }
            return Ok(Self::Folder(PathBuf::from(raw)));
        }
        Ok(Self::Pushed {
            name: raw.to_owned(),
            version,
        })
    }
}

/// A definition chosen and loaded: the version UserMessages name, the version parsed, and
/// the loader CreateEmails reads it through.
#[derive(Clone)]
pub struct Chosen {
    pub pinned: PinnedDefinition,
    pub loaded: Arc<LoadedDefinition>,
    pub loader: Arc<dyn DefinitionLoader>,
    /// The folder it was read from (None: pushed).
    pub folder: Option<PathBuf>,
}

impl Chosen {
    /// `source` loaded: a pushed version from `table` (the stack's campaigns table), or a
    /// folder read and checked.
    pub async fn load(source: &Source, table: DefinitionsTable) -> Result<Self> {
        match source {
            Source::Folder(dir) => Self::folder(dir),
            Source::Pushed { name, version } => Self::pushed(table, name, *version).await,
        }
    }

    /// Version `version` (None: the latest) of the pushed definition `name`.
    pub async fn pushed(table: DefinitionsTable, name: &str, version: Option<u32>) -> Result<Self> {
        let version = match version {
            Some(version) => version,
            None => match table.latest(name).await? {
                Some(info) => info.version,
                None => return Err(DefinitionError::Unknown(name.to_owned()).into()),
            },
        };
        let cache = Arc::new(DefinitionCache::new(table));
        let loaded = cache.load(name, version).await?;
        Ok(Self {
            pinned: PinnedDefinition {
                name: name.to_owned(),
                version,
            },
            loaded,
            loader: cache,
            folder: None,
        })
    }

    /// The definition in `dir`, read and checked as `mailctl campaign check` does (every
    /// problem on a line of the error), served as version `FOLDER_VERSION`.
    pub fn folder(dir: &Path) -> Result<Self> {
        let refused = |errors: Vec<String>| {
            anyhow!(
                "{}: the definition does not pass `mailctl campaign check`:\n  {}",
                dir.display(),
                errors.join("\n  ")
            )
        };
        let files = crate::definition::read_dir(dir).map_err(refused)?;
        let definition = crate::definition::checked(&files).map_err(refused)?;
        let templates = DefinitionTemplates::new(&definition).map_err(refused)?;
        let info = VersionInfo {
            name: definition.name.clone(),
            version: FOLDER_VERSION,
            sha256: content_hash(&files),
            pushed_at_ms: 0,
            pushed_by: None,
            schedule: definition.schedule.clone(),
        };
        let loaded = Arc::new(LoadedDefinition {
            info,
            definition,
            templates,
            files,
        });
        Ok(Self {
            pinned: PinnedDefinition {
                name: loaded.info.name.clone(),
                version: FOLDER_VERSION,
            },
            loader: Arc::new(Folder(loaded.clone())),
            loaded,
            folder: Some(dir.to_owned()),
        })
    }

    /// What a command says it rendered with: `orders v2`, or `orders (folder DIR, not
    /// pushed)`.
    pub fn describe(&self) -> String {
        match &self.folder {
            Some(dir) => format!(
                "{} (folder {}, not pushed)",
                self.pinned.name,
                dir.display()
            ),
            None => format!("{} v{}", self.pinned.name, self.pinned.version),
        }
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, DefinitionError>> + Send + 'a>>;

/// A folder's definition as CreateEmails' loader: its one version, `FOLDER_VERSION`.
struct Folder(Arc<LoadedDefinition>);

impl DefinitionLoader for Folder {
    fn load<'a>(&'a self, name: &'a str, version: u32) -> Boxed<'a, Arc<LoadedDefinition>> {
        let found = (name == self.0.info.name && version == FOLDER_VERSION).then(|| self.0.clone());
        Box::pin(async move { found.ok_or_else(|| DefinitionError::Unknown(name.to_owned())) })
    }

    fn latest<'a>(&'a self, name: &'a str) -> Boxed<'a, Option<VersionInfo>> {
        let found = (name == self.0.info.name).then(|| self.0.info.clone());
        Box::pin(async move { Ok(found) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_a_folder_and_a_name_a_pushed_definition() {
        assert_eq!(
            Source::parse("orders", Some(2)).unwrap(),
            Source::Pushed {
                name: "orders".into(),
                version: Some(2)
            }
        );
        assert_eq!(
            Source::parse("campaigns/orders", None).unwrap(),
            Source::Folder("campaigns/orders".into())
        );
        assert_eq!(
            Source::parse("./orders", None).unwrap(),
            Source::Folder("./orders".into())
        );
        assert!(Source::parse("./orders", Some(1)).is_err());
    }

    #[tokio::test]
    async fn a_folder_is_served_as_version_0_and_nothing_else() {
        let dir = crate::repo_root().join("campaigns/orders");
        let chosen = Chosen::folder(&dir).unwrap();
        assert_eq!(
            chosen.pinned,
            PinnedDefinition {
                name: "orders".into(),
                version: FOLDER_VERSION
            }
        );
        assert!(chosen.loader.load("orders", 0).await.is_ok());
        assert!(chosen.loader.load("orders", 1).await.is_err());
        assert!(chosen.loader.load("digest", 0).await.is_err());
        assert_eq!(
            chosen
                .loader
                .latest("orders")
                .await
                .unwrap()
                .unwrap()
                .version,
            0
        );
        assert!(chosen.describe().starts_with("orders (folder "));

        let Err(missing) = Chosen::folder(Path::new("/nonexistent/definition")) else {
            panic!("a folder that is not there is refused");
        };
        assert!(missing.to_string().contains("does not pass"), "{missing:#}");
    }
}
