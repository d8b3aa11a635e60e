//! Pushed definitions in memory, with the DynamoDB store's rules: the same size limit, and
//! a push that reads the head, then writes only if it is unchanged, trying again when
//! another push came in between (`races`: pushes a test makes win each race).

use crate::domain::definition::Files;
use crate::ports::definitions::{
    check_name, content_hash, pack, unpack, DefinitionError, DefinitionStore, Push, Pushed,
    StoredDefinition, VersionInfo, MAX_ITEM_BYTES, PUSH_ATTEMPTS,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A stored version and its packed files.
pub type Version = (VersionInfo, Vec<u8>);

#[derive(Default)]
pub struct MemoryDefinitions {
    /// Each definition's versions, oldest first.
    pub versions: Mutex<BTreeMap<String, Vec<Version>>>,
    /// Pushes by someone else that land between a push's read and its write, one per race.
    pub races: AtomicU32,
    /// How often `get` was asked (what the cache saves).
    pub gets: AtomicUsize,
}

impl MemoryDefinitions {
    fn head(&self, name: &str) -> Option<VersionInfo> {
        crate::runtime::lock(&self.versions)
            .get(name)
            .and_then(|v| v.last())
            .map(|(info, _)| info.clone())
    }

    /// Appends `info` only if the latest is still `seen` (DynamoDB's conditional write).
    fn write_if(&self, seen: u32, info: VersionInfo, packed: Vec<u8>) -> bool {
        let mut all = crate::runtime::lock(&self.versions);
        let versions = all.entry(info.name.clone()).or_default();
        if versions.len() as u32 != seen {
            return false;
        }
        versions.push((info, packed));
        true
    }

    /// Someone else's push of other files, now.
    fn race(&self, name: &str) {
        let seen = self.head(name).map_or(0, |h| h.version);
        let files = Files::from([("racer".to_owned(), seen.to_string())]);
        let info = VersionInfo {
            name: name.to_owned(),
            version: seen + 1,
            sha256: content_hash(&files),
            pushed_at_ms: 0,
            pushed_by: Some("racer".into()),
            schedule: None,
        };
        self.write_if(seen, info, pack(&files));
    }
}

impl DefinitionStore for MemoryDefinitions {
    async fn push(&self, push: Push<'_>) -> Result<Pushed, DefinitionError> {
        check_name(push.name)?;
        let sha256 = content_hash(push.files);
        let packed = pack(push.files);
        if packed.len() > MAX_ITEM_BYTES {
            return Err(DefinitionError::TooBig {
                name: push.name.to_owned(),
                bytes: packed.len(),
                limit: MAX_ITEM_BYTES,
            });
        }
        for _ in 0..PUSH_ATTEMPTS {
            let head = self.head(push.name);
            if let Some(head) = head.as_ref().filter(|h| h.sha256 == sha256) {
                return Ok(Pushed::Unchanged(head.clone()));
            }
            let seen = head.map_or(0, |h| h.version);
            if self
                .races
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
                .is_ok()
            {
                self.race(push.name);
            }
            let info = VersionInfo {
                name: push.name.to_owned(),
                version: seen + 1,
                sha256: sha256.clone(),
                pushed_at_ms: push.at_ms,
                pushed_by: push.by.map(str::to_owned),
                schedule: push.schedule.map(str::to_owned),
            };
            if self.write_if(seen, info.clone(), packed.clone()) {
                return Ok(Pushed::Stored(info));
            }
        }
        Err(DefinitionError::Contended {
            name: push.name.to_owned(),
            attempts: PUSH_ATTEMPTS,
        })
    }

    async fn get(&self, name: &str, version: u32) -> Result<StoredDefinition, DefinitionError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let all = crate::runtime::lock(&self.versions);
        let versions = all
            .get(name)
            .ok_or_else(|| DefinitionError::Unknown(name.to_owned()))?;
        let (info, packed) = version
            .checked_sub(1)
            .and_then(|i| versions.get(i as usize))
            .ok_or_else(|| DefinitionError::NoVersion {
                name: name.to_owned(),
                version,
                latest: versions.len() as u32,
            })?;
        let files = unpack(packed, &info.sha256).map_err(|why| DefinitionError::Corrupt {
            name: name.to_owned(),
            version,
            why,
        })?;
        Ok(StoredDefinition {
            info: info.clone(),
            files,
        })
    }

    async fn latest(&self, name: &str) -> Result<Option<VersionInfo>, DefinitionError> {
        Ok(self.head(name))
    }

    async fn list(&self) -> Result<Vec<VersionInfo>, DefinitionError> {
        Ok(crate::runtime::lock(&self.versions)
            .values()
            .filter_map(|v| v.last().map(|(info, _)| info.clone()))
            .collect())
    }

    async fn versions(&self, name: &str) -> Result<Vec<VersionInfo>, DefinitionError> {
        Ok(crate::runtime::lock(&self.versions)
            .get(name)
            .map(|v| v.iter().map(|(info, _)| info.clone()).collect())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::definitions::DefinitionCache;
    use std::sync::Arc;

    fn files(body: &str) -> Files {
        Files::from([
            ("campaign.toml".to_owned(), "name = \"digest\"\n".to_owned()),
            ("templates/en/body.txt.j2".to_owned(), body.to_owned()),
        ])
    }

    fn push<'a>(name: &'a str, files: &'a Files) -> Push<'a> {
        Push {
            name,
            files,
            schedule: Some("cron(0 9 ? * MON *)"),
            at_ms: 1_000,
            by: Some("ana"),
        }
    }

    #[tokio::test]
    async fn a_push_is_a_new_version_unless_its_content_is_the_latests() {
        let store = MemoryDefinitions::default();
        let (one, two) = (files("Hello"), files("Hello again"));
        let first = store.push(push("digest", &one)).await.unwrap();
        assert!(matches!(&first, Pushed::Stored(i) if i.version == 1));
        assert_eq!(first.info().pushed_by.as_deref(), Some("ana"));
        let again = store.push(push("digest", &one)).await.unwrap();
        assert_eq!(again, Pushed::Unchanged(first.info().clone()));
        let second = store.push(push("digest", &two)).await.unwrap();
        assert!(matches!(&second, Pushed::Stored(i) if i.version == 2));
        // Back to the first content: not the latest's, so a new version (3), and 1 stays.
        let third = store.push(push("digest", &one)).await.unwrap();
        assert_eq!(third.info().version, 3);
        assert_eq!(third.info().sha256, first.info().sha256);
        assert_eq!(store.get("digest", 1).await.unwrap().files, one);
        assert_eq!(store.get("digest", 2).await.unwrap().files, two);
        let versions = store.versions("digest").await.unwrap();
        assert_eq!(
            versions.iter().map(|v| v.version).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(store.latest("digest").await.unwrap().unwrap().version, 3);
        assert_eq!(store.list().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn unknown_names_and_versions_say_what_exists() {
        let store = MemoryDefinitions::default();
        let err = store.get("digest", 1).await.unwrap_err();
        assert!(err.to_string().contains("mailctl campaign push"), "{err}");
        store.push(push("digest", &files("a"))).await.unwrap();
        let err = store.get("digest", 2).await.unwrap_err();
        assert_eq!(err.to_string(), "definition digest has no version 2 (its latest is 1): `mailctl campaign show digest` lists its versions");
        assert!(store.get("digest", 0).await.is_err());
        assert_eq!(store.latest("other").await.unwrap(), None);
        assert!(store.versions("other").await.unwrap().is_empty());
        for bad in ["", "Digest", "a/b", "d#1", "<b>", "é", &"x".repeat(41)] {
            let err = store.push(push(bad, &files("a"))).await.unwrap_err();
            assert_eq!(err, DefinitionError::BadName(bad.to_owned()));
        }
    }

    #[tokio::test]
    async fn a_push_too_big_for_one_item_is_refused_whole() {
        let store = MemoryDefinitions::default();
        // Deflate cannot shrink noise: 600 KB of it stays over 400 KB.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: String = (0..600_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        let err = store
            .push(push("digest", &files(&noise)))
            .await
            .unwrap_err();
        assert!(matches!(err, DefinitionError::TooBig { bytes, .. } if bytes > MAX_ITEM_BYTES));
        assert!(err.to_string().contains("nothing was stored"), "{err}");
        assert!(store.versions("digest").await.unwrap().is_empty());
        // The same size of text deflates well under the limit.
        let text = "Your new followers this week. ".repeat(20_000);
        assert!(store.push(push("digest", &files(&text))).await.is_ok());
    }

    #[tokio::test]
    async fn pushes_at_once_get_distinct_versions() {
        let store = Arc::new(MemoryDefinitions::default());
        let pushes = (0..8).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let f = files(&format!("body {i}"));
                store.push(push("digest", &f)).await.unwrap().info().version
            })
        });
        let mut versions: Vec<u32> = futures::future::join_all(pushes)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        versions.sort_unstable();
        assert_eq!(versions, (1..=8).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_push_that_loses_a_race_tries_again_a_bounded_number_of_times() {
        let store = MemoryDefinitions::default();
        store.races.store(2, Ordering::SeqCst);
        let won = store.push(push("digest", &files("a"))).await.unwrap();
        // Two racers took 1 and 2; the push is 3, its content intact.
        assert_eq!(won.info().version, 3);
        assert_eq!(store.get("digest", 3).await.unwrap().files, files("a"));
        store.races.store(PUSH_ATTEMPTS, Ordering::SeqCst);
        let err = store.push(push("digest", &files("b"))).await.unwrap_err();
        assert_eq!(
            err,
            DefinitionError::Contended {
                name: "digest".into(),
                attempts: PUSH_ATTEMPTS
            }
        );
    }

    #[tokio::test]
    async fn a_version_is_read_once_by_the_cache_and_checked_against_its_hash() {
        let cache = DefinitionCache::new(MemoryDefinitions::default());
        cache.store.push(push("digest", &files("a"))).await.unwrap();
        for _ in 0..3 {
            assert_eq!(cache.get("digest", 1).await.unwrap().files, files("a"));
        }
        assert_eq!(cache.store.gets.load(Ordering::SeqCst), 1);
        // An error is not cached: the version pushed afterwards is read.
        assert!(cache.get("digest", 2).await.is_err());
        cache.store.push(push("digest", &files("b"))).await.unwrap();
        assert_eq!(cache.get("digest", 2).await.unwrap().files, files("b"));
        // Stored bytes that are not what the hash says are refused, not used.
        crate::runtime::lock(&cache.store.versions)
            .get_mut("digest")
            .unwrap()[1]
            .1 = pack(&files("tampered"));
        let err = cache.store.get("digest", 2).await.unwrap_err();
        assert!(
            matches!(err, DefinitionError::Corrupt { version: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn the_hash_frames_each_file_so_no_two_sets_collide() {
        let a = Files::from([("a".to_owned(), "bc".to_owned())]);
        let b = Files::from([("ab".to_owned(), "c".to_owned())]);
        assert_ne!(content_hash(&a), content_hash(&b));
        assert_eq!(content_hash(&a).len(), 64);
        let non_ascii = Files::from([(
            "samples/é.json".to_owned(),
            "{\"name\": \"Zoë <b>\"}".to_owned(),
        )]);
        assert_eq!(
            unpack(&pack(&non_ascii), &content_hash(&non_ascii)).unwrap(),
            non_ascii
        );
        assert!(unpack(b"not deflate", &content_hash(&a)).is_err());
    }
}
