//! The digest of new followers as the functions' build carries it: the files of
//! `campaigns/digest/`, compiled in. It is what a start that names no definition runs (the
//! stack's weekly schedule, `{"campaignId": "weekly-2026-W47"}`), so today's campaigns and
//! their ids keep working on a stack where nobody pushed a definition. A pushed `digest`
//! is a definition like any other (its versions count from 1, its campaigns are
//! `digest-*`); this copy is version 0 and never changes within a build.

use super::Files;

/// The bundled definition's name, as its `campaign.toml` says.
pub const NAME: &str = "digest";
/// Its version: pushed versions count from 1, so 0 is never one of them.
pub const VERSION: u32 = 0;

macro_rules! bundled {
    ($($path:literal),* $(,)?) => {
        [$(($path, include_str!(concat!("../../../../campaigns/digest/", $path)))),*]
    };
}

/// Every file of `campaigns/digest/` (a test checks that none is missing).
const FILES: &[(&str, &str)] = &bundled![
    "campaign.toml",
    "samples/hostile-names.json",
    "samples/many-followers.json",
    "samples/no-names.json",
    "samples/one-follower.json",
    "templates/de/body.mjml.j2",
    "templates/de/body.txt.j2",
    "templates/de/dates.j2",
    "templates/de/short/body.mjml.j2",
    "templates/de/short/body.txt.j2",
    "templates/de/subject.txt.j2",
    "templates/en/body.mjml.j2",
    "templates/en/body.txt.j2",
    "templates/en/dates.j2",
    "templates/en/short/body.mjml.j2",
    "templates/en/short/body.txt.j2",
    "templates/en/subject.txt.j2",
    "templates/fr/body.mjml.j2",
    "templates/fr/body.txt.j2",
    "templates/fr/dates.j2",
    "templates/fr/short/body.mjml.j2",
    "templates/fr/short/body.txt.j2",
    "templates/fr/subject.txt.j2",
    "templates/layout.mjml.j2",
    "templates/picks.mjml.j2",
];

/// The bundled digest's files, as a push of `campaigns/digest/` would store them.
pub fn files() -> Files {
    FILES
        .iter()
        .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_digest_is_the_folder_and_loads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../campaigns/digest");
        let folder = super::super::read_folder(&dir);
        assert_eq!(
            files(),
            folder,
            "list every file of campaigns/digest in FILES"
        );
        let definition = super::super::Definition::load(&files()).unwrap();
        assert_eq!(definition.name, NAME);
    }
}
