//! Samples (`samples/*.json`): the recipients and data a definition ships so that `check`
//! renders every language and body before anything is pushed.

use super::*;

/// A sample recipient, `samples/<name>.json`: rendered by `check` in every language and
/// every body, with and without picks.
///
/// ```json
/// {
///   "user": {"id": "u42", "name": "Ada <b>Lovelace</b>", "language": "fr-CA"},
///   "data": {"followers": {"count": {"$numberLong": "3"}, "names": ["Grace", "Linus"]}},
///   "params": {"shown": 2}
/// }
/// ```
///
/// `user.name` and `user.language` may be null or left out (`language` is replaced by each
/// language in turn anyway); `data` holds every data query's result by name, as relaxed
/// Extended JSON (what the query would give this user; null for none with `first`);
/// `params`, optional, overrides some of the campaign's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    pub user: SampleUser,
    pub data: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleUser {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub language: Option<String>,
}

/// The window samples are rendered in: a week of November 2026.
fn sample_window() -> Window {
    Window {
        since: time::macros::datetime!(2026-11-16 0:00 UTC),
        until: time::macros::datetime!(2026-11-23 0:00 UTC),
    }
}

/// Every sample (`samples/*.json` of `files`) rendered in every language, in every body
/// and with and without picks: one line per problem, naming the file (and template and
/// line when one fails). Empty: the definition's templates render its samples.
pub fn check_samples(definition: &Definition, files: &Files) -> Vec<String> {
    check_renders(definition, files, None)
}

/// Every sample rendered in every language with an experiment variant's subjects (by
/// language, each a template with `subject.txt`'s context) in place of `subject.txt`: one
/// line per problem, as `check_samples`. A language without one renders its own.
fn check_variant_subjects(
    definition: &Definition,
    files: &Files,
    subjects: &BTreeMap<String, String>,
) -> Vec<String> {
    // Only the subjects' own failures: the definition's templates were checked when it was
    // pushed, and one failing on a build that reads them otherwise is not the experiment's
    // fault (it shows at run time, per email, with its own reason).
    check_renders(definition, files, Some(subjects))
}

fn check_renders(
    definition: &Definition,
    files: &Files,
    subjects: Option<&BTreeMap<String, String>>,
) -> Vec<String> {
    let templates = match DefinitionTemplates::new(definition) {
        Ok(t) => t,
        Err(errors) => return errors,
    };
    let topic = match Topics::builtin().get(&definition.topic) {
        Ok(topic) => topic,
        Err(e) => return vec![format!("campaign.toml: topic: {e}")],
    };
    let samples: Vec<(&String, &String)> = files
        .iter()
        .filter(|(path, _)| path.starts_with("samples/") && path.ends_with(".json"))
        .collect();
    if samples.is_empty() {
        return vec![
            "samples/: none; add samples/<name>.json (a user and their data, as relaxed Extended JSON) for each case the templates handle".into(),
        ];
    }
    let window = sample_window();
    let picks: Vec<SlotUrls> = (1..=3)
        .map(|i| SlotUrls {
            image: format!("https://o.example/pick?t=S{i}&s=1"),
            badge: format!("https://o.example/badge?t=S{i}"),
            link: format!("https://o.example/go?t=S{i}"),
        })
        .collect();
    let mut errors = Vec::new();
    for (path, source) in samples {
        let sample = match read_sample(path, source, definition) {
            Ok(sample) => sample,
            Err(mut e) => {
                errors.append(&mut e);
                continue;
            }
        };
        let mut seen = std::collections::BTreeSet::new();
        for language in &templates.languages {
            let bodies =
                std::iter::once(None).chain(templates.variants.iter().map(|v| Some(v.as_str())));
            for variant in bodies {
                for picks in [&picks[..0], &picks[..]] {
                    let email = Email {
                        window: &window,
                        topic,
                        manage_url: "https://u.example/?token=sample",
                        picks,
                        variant,
                        subject: subjects.and_then(|s| s.get(language)).map(String::as_str),
                    };
                    let rendered = templates.render_in(
                        language,
                        &sample.user_id,
                        sample.name.as_deref(),
                        sample.data.clone(),
                        sample.params.clone(),
                        &email,
                        VariantSubject::Strict,
                    );
                    let variant_subject = file(&format!("{VARIANT_SUBJECT}{language}"));
                    let problem = match rendered {
                        Ok(r) if r.subject.is_empty() => Some(format!(
                            "{}: the subject renders empty",
                            match subjects.is_some_and(|s| s.contains_key(language)) {
                                true => variant_subject.clone(),
                                false => file(&format!("{language}/subject.txt")),
                            }
                        )),
                        Ok(_) => None,
                        // With variant subjects, only theirs: the definition's own templates
                        // were checked when it was pushed, and one failing on a build that
                        // reads them otherwise is not the experiment's fault (it shows at
                        // run time, per email, with its reason).
                        Err(
                            RenderError::Template { template, .. }
                            | RenderError::SubjectTooLong { template, .. },
                        ) if subjects.is_some() && template != variant_subject => None,
                        Err(e)
                            if subjects.is_some()
                                && !matches!(
                                    e,
                                    RenderError::Template { .. }
                                        | RenderError::SubjectTooLong { .. }
                                ) =>
                        {
                            None
                        }
                        Err(RenderError::Template { source, .. }) => Some(describe(&source)),
                        Err(e) => Some(e.to_string()),
                    };
                    if let Some(problem) = problem {
                        if seen.insert(problem.clone()) {
                            errors.push(format!(
                                "{problem} (rendering {path} in {language}, {} body, {} picks)",
                                variant.unwrap_or("the language's own"),
                                if picks.is_empty() { "without" } else { "with" },
                            ));
                        }
                    }
                }
            }
        }
    }
    errors
}

/// Whether `experiment` fits a campaign of `definition` (its `files` hold the samples): each
/// variant's body is one of its bodies (`<lang>/<variant>/`), and its subjects, one for
/// each of its languages, are templates with `subject.txt`'s context that render every
/// sample. Err: the first problem, one line naming the variant.
pub fn check_experiment(
    experiment: &crate::domain::experiment::Experiment,
    definition: &Definition,
    files: &Files,
) -> Result<(), String> {
    for variant in &experiment.variants {
        if let Some(body) = &variant.template {
            if !definition.templates.variants.contains(body) {
                return Err(format!(
                    "experiment variant {}: definition {} has no body {body:?} (its bodies: {}); add templates/<lang>/{body}/ to it, or leave template out",
                    variant.name,
                    definition.name,
                    match definition.templates.variants.is_empty() {
                        true => "none".to_owned(),
                        false => definition.templates.variants.join(", "),
                    }
                ));
            }
        }
        if variant.subject.is_empty() {
            continue;
        }
        let languages = &definition.templates.languages;
        let missing: Vec<&str> = languages
            .iter()
            .filter(|l| !variant.subject.contains_key(*l))
            .map(String::as_str)
            .collect();
        let extra = variant.subject.keys().find(|l| !languages.contains(l));
        let problem = match (missing.is_empty(), extra) {
            (false, _) => Some(format!(
                "a subject is needed for each of definition {}'s languages; missing {}",
                definition.name,
                missing.join(", ")
            )),
            (true, Some(extra)) => Some(format!(
                "definition {} has no language {extra:?} (its languages: {})",
                definition.name,
                languages.join(", ")
            )),
            (true, None) => check_variant_subjects(definition, files, &variant.subject)
                .into_iter()
                .next(),
        };
        if let Some(problem) = problem {
            return Err(format!("experiment variant {}: {problem}", variant.name));
        }
    }
    Ok(())
}

/// A sample as `render_in` takes it.
struct ReadSample {
    user_id: UserId,
    name: Option<String>,
    data: Value,
    params: Value,
}

fn read_sample(
    path: &str,
    source: &str,
    definition: &Definition,
) -> Result<ReadSample, Vec<String>> {
    let sample: Sample = serde_json::from_str(source).map_err(|e| {
        let message = e.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m);
        vec![format!("{path}:{}:{}: {message}", e.line(), e.column())]
    })?;
    let mut errors = Vec::new();
    let user_id = UserId::parse(&sample.user.id)
        .map_err(|e| errors.push(format!("{path}: user.id: {e}")))
        .ok();
    for name in sample.data.keys() {
        if !definition.data.contains_key(name) {
            errors.push(format!(
                "{path}: data.{name}: campaign.toml has no [data.{name}] (have: {})",
                definition
                    .data
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for name in definition.data.keys() {
        if !sample.data.contains_key(name) {
            errors.push(format!(
                "{path}: data.{name} missing: write what [data.{name}] gives this user (null for none)"
            ));
        }
    }
    let mut params = BTreeMap::new();
    for (name, json) in definition.params.iter().chain(&sample.params) {
        if !definition.params.contains_key(name) {
            errors.push(format!(
                "{path}: params.{name}: campaign.toml's [params] has no {name}"
            ));
            continue;
        }
        match to_value(json) {
            Ok(v) => {
                params.insert(name.clone(), v);
            }
            Err(e) => errors.push(format!("{path}: params.{name}: {e}")),
        }
    }
    let data = data_value(&sample.data, "data")
        .map_err(|e| errors.push(format!("{path}: {e}")))
        .ok();
    match (user_id, data) {
        (Some(user_id), Some(data)) if errors.is_empty() => Ok(ReadSample {
            user_id,
            name: sample.user.name,
            data,
            params: Value::from(params),
        }),
        _ => Err(errors),
    }
}
