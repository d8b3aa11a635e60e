//! Which of the languages an email is written in suits a user: one rule for the bundled
//! digest and for campaign definitions.

/// The language of `have` a user's stored locale names (`fr`, `fr-CA`, `de_DE`: the part
/// before `-` or `_`, trimmed, any case), else `default`.
pub fn closest<'a>(
    user_locale: Option<&str>,
    have: impl IntoIterator<Item = &'a str>,
    default: &'a str,
) -> &'a str {
    let language = user_locale
        .and_then(|l| l.split(['-', '_']).next())
        .map(|l| l.trim().to_ascii_lowercase());
    have.into_iter()
        .find(|l| Some(*l) == language.as_deref())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn the_language_part_picks_else_the_default() {
        let have = ["en", "fr", "de"];
        let pick = |l: Option<&str>| closest(l, have, "en");
        assert_eq!(pick(Some("fr-CA")), "fr");
        assert_eq!(pick(Some("DE_de")), "de");
        assert_eq!(pick(Some(" de ")), "de");
        assert_eq!(pick(Some("pt-BR")), "en");
        assert_eq!(pick(Some("")), "en");
        assert_eq!(pick(None), "en");
        assert_eq!(closest(Some("xx"), have, "fr"), "fr");
    }
}
