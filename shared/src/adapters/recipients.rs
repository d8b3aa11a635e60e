//! Where a campaign's recipients are, for whatever writes or reads again a person's standing
//! (`Subscribers`: the one-click, the preference centre, SES's bounces and complaints,
//! SendEmail's read for an email that waited). The campaign's record in the campaigns table
//! says which definition version it runs (its pin); that version's `[recipients]` names the
//! collection and the field paths. A campaign without a pin (the built-in digest, or one
//! recorded before definitions) has ours: the `users` collection and its fields.
//!
//! Resolved once per campaign for the environment's life: a pin is written by a campaign's
//! first run and never changed (`domain::definition::pin`), and a version never changes. A
//! campaign with no record yet is not remembered (its first run may still pin one).

use super::campaigns::CampaignsTable;
use super::definitions::DefinitionsTable;
use super::profile::ProfileFields;
use crate::domain::definition::pin::PinnedDefinition;
use crate::domain::definition::Definition;
use crate::ports::definitions::{DefinitionCache, DefinitionError, DefinitionStore};
use crate::ports::{StoreError, SubscriberError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};

/// Campaigns remembered; past that the cache starts over (an environment meets a few).
const CACHED_CAMPAIGNS: usize = 256;

/// What a campaign's record says of its definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pin {
    /// No record: the campaign was never started here.
    NoRecord,
    /// Recorded without a definition: the built-in digest, or from before definitions.
    BuiltIn,
    /// The definition version its first run pinned.
    Definition(PinnedDefinition),
}

/// The campaigns table as the resolution reads it.
pub trait CampaignPins: Send + Sync {
    fn pin(&self, campaign_id: &str) -> impl Future<Output = Result<Pin, StoreError>> + Send;
}

impl CampaignPins for CampaignsTable {
    /// One consistent GetItem of the campaign's item.
    async fn pin(&self, campaign_id: &str) -> Result<Pin, StoreError> {
        let record = self
            .record(campaign_id)
            .await
            .map_err(|e| StoreError(e.to_string()))?;
        Ok(match record {
            None => Pin::NoRecord,
            Some(record) => record.definition.map_or(Pin::BuiltIn, Pin::Definition),
        })
    }
}

static OURS: LazyLock<Arc<ProfileFields>> =
    LazyLock::new(|| Arc::new(ProfileFields::users().clone()));

/// Ours: the `users` collection and its fields.
pub fn ours() -> Arc<ProfileFields> {
    OURS.clone()
}

/// Each campaign's recipients, resolved at its first use and remembered.
pub struct CampaignRecipients<P = CampaignsTable, D = DefinitionsTable> {
    pins: P,
    definitions: DefinitionCache<D>,
    resolved: Mutex<HashMap<String, Arc<ProfileFields>>>,
}

impl<P: CampaignPins, D: DefinitionStore> CampaignRecipients<P, D> {
    pub fn new(pins: P, definitions: D) -> Self {
        Self {
            pins,
            definitions: DefinitionCache::new(definitions),
            resolved: Mutex::default(),
        }
    }

    /// Where `campaign_id`'s recipients are. A record that cannot be read is a store error
    /// (tried again later); a pinned version that cannot be read or that this build refuses
    /// is `Lasting`, naming the campaign, the definition and the version.
    pub async fn of(&self, campaign_id: &str) -> Result<Arc<ProfileFields>, SubscriberError> {
        if let Some(hit) = crate::runtime::lock(&self.resolved).get(campaign_id) {
            return Ok(hit.clone());
        }
        let fields = match self.pins.pin(campaign_id).await? {
            Pin::NoRecord => return Ok(OURS.clone()),
            Pin::BuiltIn => OURS.clone(),
            Pin::Definition(pin) => Arc::new(self.load(campaign_id, &pin).await?),
        };
        let mut resolved = crate::runtime::lock(&self.resolved);
        if resolved.len() >= CACHED_CAMPAIGNS {
            resolved.clear();
        }
        Ok(resolved
            .entry(campaign_id.to_owned())
            .or_insert(fields)
            .clone())
    }

    /// The pinned version's `[recipients]`. Only its files are parsed (its templates are
    /// not compiled): a person's standing does not wait on what their email looked like.
    async fn load(
        &self,
        campaign_id: &str,
        pin: &PinnedDefinition,
    ) -> Result<ProfileFields, SubscriberError> {
        let lasting = |err: DefinitionError| {
            SubscriberError::Lasting(format!(
                "campaign {campaign_id}: its recipients cannot be found: {err}"
            ))
        };
        let stored = match self.definitions.get(&pin.name, pin.version).await {
            Ok(stored) => stored,
            Err(DefinitionError::Store(detail)) => {
                return Err(StoreError(format!(
                    "campaign {campaign_id}: definition {} version {} not read: {detail}",
                    pin.name, pin.version
                ))
                .into())
            }
            Err(err) => return Err(lasting(err)),
        };
        let definition = Definition::load(&stored.files).map_err(|errors| {
            lasting(DefinitionError::Refused {
                name: pin.name.clone(),
                version: pin.version,
                first: errors.into_iter().next().unwrap_or_default(),
            })
        })?;
        Ok(ProfileFields::of(&definition.recipients))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::definition::Files;
    use crate::ports::definitions::Push;
    use crate::ports::memory::MemoryDefinitions;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Pins by campaign id; a campaign not listed has no record; `failing` answers errors.
    #[derive(Default)]
    struct Pins {
        pins: HashMap<String, Pin>,
        failing: std::sync::atomic::AtomicBool,
        reads: AtomicUsize,
    }

    impl CampaignPins for Pins {
        async fn pin(&self, campaign_id: &str) -> Result<Pin, StoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError("DynamoDB: throttled".into()));
            }
            Ok(self.pins.get(campaign_id).cloned().unwrap_or(Pin::NoRecord))
        }
    }

    fn orders(recipients: &str) -> Files {
        Files::from([
            (
                "campaign.toml".to_owned(),
                format!(
                    "name = \"orders\"\ndescription = \"Orders\"\ntopic = \"product-news\"\n\
                     default_language = \"en\"\n{recipients}\n\
                     [audience]\ncollection = \"customers\"\n"
                ),
            ),
            ("templates/en/subject.txt.j2".to_owned(), "Hi".to_owned()),
            ("templates/en/body.mjml.j2".to_owned(), "<mjml><mj-body><mj-section><mj-column><mj-text>Hi</mj-text></mj-column></mj-section></mj-body></mjml>".to_owned()),
            ("templates/en/body.txt.j2".to_owned(), "Hi".to_owned()),
        ])
    }

    const NESTED: &str = "[recipients]\ncollection = \"customers\"\nemail = \"contact.email\"\n\
        language = \"prefs.lang\"\nsubscribed = \"prefs.subscribed\"\n\
        topics = \"prefs.topics\"\nsuppression = \"flags.suppression\"\n";

    async fn pushed(files: &[Files]) -> MemoryDefinitions {
        let store = MemoryDefinitions::default();
        for files in files {
            store
                .push(Push {
                    name: "orders",
                    files,
                    schedule: None,
                    at_ms: 1,
                    by: None,
                })
                .await
                .unwrap();
        }
        store
    }

    fn pin(version: u32) -> Pin {
        Pin::Definition(PinnedDefinition {
            name: "orders".into(),
            version,
        })
    }

    #[tokio::test]
    async fn a_pinned_campaign_has_its_definitions_recipients_and_others_ours() {
        let pins = Pins {
            pins: HashMap::from([
                ("orders-1".to_owned(), pin(1)),
                ("weekly-2026-W47".to_owned(), Pin::BuiltIn),
            ]),
            ..Default::default()
        };
        let recipients = CampaignRecipients::new(pins, pushed(&[orders(NESTED)]).await);
        let fields = recipients.of("orders-1").await.unwrap();
        assert_eq!(fields.collection, "customers");
        assert_eq!(fields.language.as_deref(), Some("prefs.lang"));
        assert_eq!(fields.standing.subscribed, "prefs.subscribed");
        assert_eq!(fields.standing.suppression, "flags.suppression");
        assert_eq!(fields.standing.topics, "prefs.topics");
        assert_eq!(fields.standing.topics_unreadable, "prefs.topicsUnreadable");
        for ours in ["weekly-2026-W47", "never-started"] {
            assert_eq!(
                *recipients.of(ours).await.unwrap(),
                *ProfileFields::users(),
                "{ours}"
            );
        }
        // A campaign that pins nothing runs the bundled digest, whose recipients are ours.
        let bundled = crate::ports::LoadedDefinition::bundled().unwrap();
        assert_eq!(
            ProfileFields::of(&bundled.definition.recipients),
            *ProfileFields::users()
        );
        // Remembered: a pin never changes. A campaign without a record is read again (its
        // first run may pin one).
        recipients.of("orders-1").await.unwrap();
        recipients.of("weekly-2026-W47").await.unwrap();
        recipients.of("never-started").await.unwrap();
        assert_eq!(recipients.pins.reads.load(Ordering::SeqCst), 4);
        assert_eq!(recipients.definitions.store.gets.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_record_not_read_is_tried_again_and_a_version_that_cannot_be_is_lasting() {
        let pins = Pins {
            pins: HashMap::from([
                ("orders-1".to_owned(), pin(1)),
                ("orders-2".to_owned(), pin(2)),
                ("orders-9".to_owned(), pin(9)),
            ]),
            ..Default::default()
        };
        // Version 2 is refused by this build (an unknown key).
        let refused = orders("[recipients]\nemail = \"contact.email\"\nphone = \"x\"\n");
        let recipients = CampaignRecipients::new(pins, pushed(&[orders(NESTED), refused]).await);
        recipients.pins.failing.store(true, Ordering::SeqCst);
        let err = recipients.of("orders-1").await.unwrap_err();
        assert!(!err.is_lasting(), "{err}");
        recipients.pins.failing.store(false, Ordering::SeqCst);
        assert_eq!(
            recipients.of("orders-1").await.unwrap().collection,
            "customers"
        );

        let err = recipients.of("orders-2").await.unwrap_err();
        assert!(err.is_lasting());
        let text = err.to_string();
        assert!(
            text.starts_with("campaign orders-2: its recipients cannot be found: definition orders version 2 is refused by the functions' build: "),
            "{text}"
        );
        let err = recipients.of("orders-9").await.unwrap_err();
        assert!(err.is_lasting());
        assert!(
            err.to_string()
                .contains("definition orders has no version 9 (its latest is 2)"),
            "{err}"
        );
    }
}
