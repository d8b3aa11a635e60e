use super::*;

fn topics() -> &'static Topics {
    Topics::builtin()
}

fn id(raw: &str) -> TopicId {
    TopicId::parse(raw).unwrap()
}

fn standing(overall: Overall, suppressed: bool, choice: Choice) -> Standing {
    Standing {
        overall,
        suppressed,
        choice,
    }
}

#[test]
fn the_builtin_topics_parse_and_the_weekly_one_is_the_digest() {
    let topics = topics();
    assert_eq!(topics.weekly().id.as_str(), "digest");
    assert!(topics.all().len() >= 2);
    for topic in topics.all() {
        for language in ["en", "de", "fr"] {
            assert!(
                topic.label.contains_key(language),
                "{} {language}",
                topic.id
            );
        }
    }
    // A default-out topic exists, so the rule's both defaults are exercised by real data.
    assert!(topics.all().iter().any(|t| t.default == Default::Out));
}

#[test]
fn a_campaign_resolves_to_the_topic_it_names_or_the_weekly_one() {
    assert_eq!(topics().resolve(None).unwrap().id, id("digest"));
    assert_eq!(
        topics().resolve(Some("product-news")).unwrap().id,
        id("product-news")
    );
    let unknown = topics().resolve(Some("newsletter")).unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "there is no topic \"newsletter\": the topics are digest, product-news, tips (shared/topics.json)"
    );
    // Not an id at all: the same answer, never a path into MongoDB.
    assert!(matches!(
        topics().resolve(Some("topics.$where")),
        Err(TopicError::Unknown { .. })
    ));
    assert!(TopicId::parse("Digest").is_err());
    assert!(TopicId::parse("").is_err());
    assert!(TopicId::parse(&"a".repeat(65)).is_err());
}

#[test]
fn a_bad_topics_file_is_refused_with_its_reason() {
    let bad = |json: &str| Topics::parse(json).unwrap_err().to_string();
    assert!(bad(r#"{"weekly":"a","topics":[{"id":"a","default":"in","label":{"en":"A"}},{"id":"a","default":"in","label":{"en":"A"}}]}"#).contains("topic a twice"));
    assert!(
        bad(r#"{"weekly":"a","topics":[{"id":"a","default":"in","label":{"de":"A"}}]}"#)
            .contains("no en label")
    );
    assert!(
        bad(r#"{"weekly":"b","topics":[{"id":"a","default":"in","label":{"en":"A"}}]}"#)
            .contains("weekly topic b")
    );
    assert!(
        bad(r#"{"weekly":"a","topics":[{"id":"A","default":"in","label":{"en":"A"}}]}"#)
            .contains("invalid")
    );
    assert!(
        bad(r#"{"weekly":"a","topics":[{"id":"a","default":"maybe","label":{"en":"A"}}]}"#)
            .contains("unknown variant")
    );
}

#[test]
fn the_audience_rule_by_reason() {
    let digest = topics().get("digest").unwrap(); // default in
    let tips = topics().get("tips").unwrap(); // default out
    use Choice::{In, Out, Unset};
    use Overall::{Subscribed, Unsubscribed};
    // Never chose: the default.
    assert_eq!(standing(Subscribed, false, Unset).exclusion(digest), None);
    assert_eq!(
        standing(Subscribed, false, Unset).exclusion(tips),
        Some(Exclusion::LeftTopic)
    );
    // Chose: the choice, whatever the default.
    assert_eq!(standing(Subscribed, false, In).exclusion(tips), None);
    assert_eq!(
        standing(Subscribed, false, Out).exclusion(digest),
        Some(Exclusion::LeftTopic)
    );
    // Out of everything (the migration: `subscribed: false` before topics) beats a topic.
    assert_eq!(
        standing(Unsubscribed, false, In).exclusion(digest),
        Some(Exclusion::Unsubscribed)
    );
    // A suppressed address beats everything.
    assert_eq!(
        standing(Subscribed, true, In).exclusion(digest),
        Some(Exclusion::Suppressed)
    );
    // Odd types are never read as a yes.
    assert_eq!(
        standing(Overall::Unreadable, false, In).exclusion(digest),
        Some(Exclusion::Unreadable)
    );
    assert_eq!(
        standing(Subscribed, false, Choice::Unreadable).exclusion(digest),
        Some(Exclusion::Unreadable)
    );
    let mut counts = ExclusionCounts::default();
    counts.add(Exclusion::LeftTopic);
    counts.add(Exclusion::Unsubscribed);
    counts.add(Exclusion::LeftTopic);
    assert_eq!(counts.describe(), "unsubscribed 1, left_topic 2");
    assert_eq!(counts.total(), 3);
}

#[test]
fn saving_writes_only_what_changes_and_coming_back_writes_every_topic() {
    let topics = topics();
    let wanted = |ids: &[&str]| ids.iter().map(|i| id(i)).collect::<BTreeSet<_>>();
    let subscriber = Preferences {
        overall: Overall::Subscribed,
        choices: BTreeMap::new(),
    };
    // Defaults: digest and product-news in, tips out.
    let shown: Vec<bool> = topics
        .all()
        .iter()
        .map(|t| subscriber.receives(t))
        .collect();
    assert_eq!(shown, [true, true, false]);
    // The same ticks: nothing to write.
    let same = subscriber.save(topics, &wanted(&["digest", "product-news"]));
    assert_eq!(same.changes, []);
    assert!(!same.resubscribe);
    // Untick the digest, tick tips.
    let save = subscriber.save(topics, &wanted(&["product-news", "tips"]));
    assert_eq!(save.changes, [(id("digest"), false), (id("tips"), true)]);
    // Out of everything: every topic shows unticked; ticking one comes back with only it.
    let gone = Preferences {
        overall: Overall::Unsubscribed,
        choices: [(id("tips"), Choice::In)].into(),
    };
    assert!(topics.all().iter().all(|t| !gone.receives(t)));
    let back = gone.save(topics, &wanted(&["digest"]));
    assert!(back.resubscribe);
    assert_eq!(
        back.changes,
        [
            (id("digest"), true),
            (id("product-news"), false),
            (id("tips"), false)
        ]
    );
    // Out of everything and nothing ticked: nothing changes.
    let still = gone.save(topics, &wanted(&[]));
    assert_eq!((still.changes.len(), still.resubscribe), (0, false));
}
