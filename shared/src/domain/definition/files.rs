//! A definition's files: the limits every copy obeys (on disk, pushed, stored) and the
//! templates' layout. Reading a folder from disk is mailctl's (`mailctl::definition`); this
//! is the pure part both sides check.

use super::{Files, Templates};
use std::collections::{BTreeMap, BTreeSet};

pub const MAX_FILES: usize = 200;
pub const MAX_BYTES: usize = 300 * 1024;

/// What each language folder has.
pub const LANGUAGE_FILES: [&str; 3] = ["subject.txt.j2", "body.mjml.j2", "body.txt.j2"];
/// What each variant folder (`templates/<lang>/<variant>/`) has.
pub const VARIANT_FILES: [&str; 2] = ["body.mjml.j2", "body.txt.j2"];

/// Why `path` (relative, `/`-separated) cannot be a definition's file, if it cannot.
pub fn path_problem(path: &str) -> Option<String> {
    if path.is_empty() || path.len() > 200 {
        return Some("a path of 1-200 characters is expected".into());
    }
    for segment in path.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Some("an empty, . or .. part; name files plainly".into());
        }
        if segment.starts_with('.') {
            return Some("a hidden name (starting with .); remove it or rename it".into());
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Some(
                "a name with characters other than A-Z, a-z, 0-9, ., _ and -; rename it".into(),
            );
        }
    }
    let allowed = path == super::load::CAMPAIGN_TOML
        || path == "README.md"
        || (path.starts_with("templates/") && path.ends_with(".j2"))
        || path
            .strip_prefix("samples/")
            .is_some_and(|name| !name.contains('/') && name.ends_with(".json"));
    if !allowed {
        return Some(
            "not a definition's file: campaign.toml, README.md, templates/**/*.j2 and samples/<name>.json are; move or remove it"
                .into(),
        );
    }
    None
}

/// The limits and names of `files`, one line per problem.
pub fn check(files: &Files) -> Vec<String> {
    let mut errors = Vec::new();
    if files.len() > MAX_FILES {
        errors.push(format!(
            "the definition has {} files; at most {MAX_FILES}: remove some",
            files.len()
        ));
    }
    let bytes: usize = files.values().map(String::len).sum();
    if bytes > MAX_BYTES {
        errors.push(format!(
            "the definition's files hold {} KiB; at most {} KiB: make them smaller",
            bytes.div_ceil(1024),
            MAX_BYTES / 1024
        ));
    }
    for path in files.keys() {
        if let Some(why) = path_problem(path) {
            errors.push(format!("{}: {why}", crate::domain::quoted(path)));
        }
    }
    errors
}

/// Looks like a language tag: `en`, `pt-BR`, `es-419`, `zh-Hant`.
pub fn is_language(name: &str) -> bool {
    let mut parts = name.split('-');
    let lang = parts.next().unwrap_or_default();
    if !(2..=3).contains(&lang.len()) || !lang.bytes().all(|b| b.is_ascii_lowercase()) {
        return false;
    }
    let rest: Vec<&str> = parts.collect();
    let region = |p: &str| {
        (p.len() == 2 && p.bytes().all(|b| b.is_ascii_uppercase()))
            || (p.len() == 3 && p.bytes().all(|b| b.is_ascii_digit()))
    };
    let script = |p: &str| {
        p.len() == 4
            && p.starts_with(|c: char| c.is_ascii_uppercase())
            && p[1..].bytes().all(|b| b.is_ascii_lowercase())
    };
    match rest.as_slice() {
        [] => true,
        [r] => region(r) || script(r),
        [s, r] => script(s) && region(r),
        _ => false,
    }
}

/// The templates of `files` (under `templates/`), their layout checked: every language
/// folder has its three files, every variant is in every language. `default_language` is
/// left empty for the caller.
pub fn templates(files: &Files) -> Result<Templates, Vec<String>> {
    let mut errors = Vec::new();
    let mut templates = BTreeMap::new();
    // language → files directly in it; language → variant → files in it.
    let mut direct: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut variants: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (path, text) in files {
        let Some(rest) = path.strip_prefix("templates/") else {
            continue;
        };
        let Some(key) = rest.strip_suffix(".j2") else {
            continue;
        };
        templates.insert(key.to_owned(), text.clone());
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [folder, file] if is_language(folder) => {
                direct.entry(folder).or_default().insert(file);
            }
            [folder, variant, file] if is_language(folder) => {
                direct.entry(folder).or_default();
                variants
                    .entry(folder)
                    .or_default()
                    .entry(variant)
                    .or_default()
                    .insert(file);
            }
            [folder, file, ..] if LANGUAGE_FILES.contains(file) => errors.push(format!(
                "templates/{folder}/: not a language tag (en, pt-BR, es-419); name the folder after its language"
            )),
            _ => {}
        }
    }
    for (lang, have) in &direct {
        let missing: Vec<&str> = LANGUAGE_FILES
            .iter()
            .filter(|f| !have.contains(*f))
            .copied()
            .collect();
        if !missing.is_empty() {
            errors.push(format!(
                "templates/{lang}/: {} missing; every language folder has {}",
                missing.join(", "),
                LANGUAGE_FILES.join(", ")
            ));
        }
    }
    let mut every_variant: BTreeMap<&str, &str> = BTreeMap::new();
    for (lang, vs) in &variants {
        for (variant, have) in vs {
            every_variant.entry(variant).or_insert(lang);
            let name_ok = variant.len() <= 32
                && variant
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !name_ok {
                errors.push(format!(
                    "templates/{lang}/{variant}/: a variant's name is 1-32 of a-z, 0-9 and - (as the experiment names it); rename the folder"
                ));
            }
            let missing: Vec<&str> = VARIANT_FILES
                .iter()
                .filter(|f| !have.contains(*f))
                .copied()
                .collect();
            if !missing.is_empty() {
                errors.push(format!(
                    "templates/{lang}/{variant}/: {} missing; a variant has {}",
                    missing.join(", "),
                    VARIANT_FILES.join(", ")
                ));
            }
        }
    }
    for (variant, has_it) in &every_variant {
        for lang in direct.keys() {
            let there = variants
                .get(lang)
                .is_some_and(|vs| vs.contains_key(variant));
            if !there {
                errors.push(format!(
                    "templates/{lang}/{variant}/: missing ({has_it} has variant {variant}); every language has every variant: add its body.mjml.j2 and body.txt.j2"
                ));
            }
        }
    }
    if direct.is_empty() {
        errors.push(
            "templates/: no language folder; add templates/<lang>/ (e.g. en) with subject.txt.j2, body.mjml.j2 and body.txt.j2"
                .into(),
        );
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Templates {
        files: templates,
        languages: direct.keys().map(|l| l.to_string()).collect(),
        default_language: String::new(),
        variants: every_variant.keys().map(|v| v.to_string()).collect(),
    })
}
