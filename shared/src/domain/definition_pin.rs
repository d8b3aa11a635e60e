//! Which version of its definition a run uses. A campaign is pinned to the version its first
//! run registered (the campaigns table's `definition` and `definitionVersion`, never changed
//! afterwards), so a re-run, a resend or a release renders what the first run rendered,
//! whatever was pushed since. Running the rest with another version is asked for by name.

/// A definition's version, as a campaign record keeps it and a run's messages carry it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PinnedDefinition {
    pub name: String,
    pub version: u32,
}

/// What a start says of its definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskedDefinition {
    pub name: String,
    /// Named by the operator (None: the pinned one, or the latest for a first run).
    pub version: Option<u32>,
}

/// The version a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// No definition: the built-in weekly digest.
    BuiltIn,
    /// The first run, nothing named: the latest version, which the run then records.
    Latest(String),
    /// The version this run records (first run) or already recorded.
    Use(PinnedDefinition),
    /// This run uses `to` although the campaign is pinned to `from`, as asked; the record
    /// keeps `from`.
    Repin {
        from: PinnedDefinition,
        to: PinnedDefinition,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error(
        "campaign {campaign} was run from definition {recorded}, not {asked}: a campaign keeps its definition; start a new campaign id for {asked}"
    )]
    OtherDefinition {
        campaign: String,
        recorded: String,
        asked: String,
    },
    #[error(
        "campaign {campaign} is pinned to version {recorded} of definition {name}, and version {asked} was asked for: leave the version out to keep {recorded}, or ask for version {asked} with repin (mailctl: --repin) to run the rest with it"
    )]
    OtherVersion {
        campaign: String,
        name: String,
        recorded: u32,
        asked: u32,
    },
    #[error(
        "repin needs the version to run with (definitionVersion; mailctl: --definition-version N)"
    )]
    RepinWithoutVersion,
    #[error(
        "campaign {campaign} is pinned to definition {name}: name it (definition: {name:?}) to re-run it, or drop repin"
    )]
    RepinWithoutDefinition { campaign: String, name: String },
}

/// The version `campaign`'s run uses: what its record pinned (`recorded`), unless the start
/// names another version with `repin`; the one asked for, or the latest, on a first run.
/// Asking for another version than the pinned one without `repin` is refused, never a
/// silent switch.
pub fn settle(
    campaign: &str,
    recorded: Option<&PinnedDefinition>,
    asked: Option<&AskedDefinition>,
    repin: bool,
) -> Result<Settled, PinError> {
    if repin && asked.is_some_and(|a| a.version.is_none()) {
        return Err(PinError::RepinWithoutVersion);
    }
    let (recorded, asked) = match (recorded, asked) {
        (None, None) if repin => return Err(PinError::RepinWithoutVersion),
        (None, None) => return Ok(Settled::BuiltIn),
        (Some(pinned), None) if repin => {
            return Err(PinError::RepinWithoutDefinition {
                campaign: campaign.to_owned(),
                name: pinned.name.clone(),
            })
        }
        (Some(pinned), None) => return Ok(Settled::Use(pinned.clone())),
        (None, Some(asked)) => {
            return Ok(match asked.version {
                Some(version) => Settled::Use(PinnedDefinition {
                    name: asked.name.clone(),
                    version,
                }),
                None => Settled::Latest(asked.name.clone()),
            })
        }
        (Some(recorded), Some(asked)) => (recorded, asked),
    };
    if recorded.name != asked.name {
        return Err(PinError::OtherDefinition {
            campaign: campaign.to_owned(),
            recorded: recorded.name.clone(),
            asked: asked.name.clone(),
        });
    }
    match asked.version {
        None => Ok(Settled::Use(recorded.clone())),
        Some(version) if version == recorded.version => Ok(Settled::Use(recorded.clone())),
        Some(version) if repin => Ok(Settled::Repin {
            from: recorded.clone(),
            to: PinnedDefinition {
                name: recorded.name.clone(),
                version,
            },
        }),
        Some(version) => Err(PinError::OtherVersion {
            campaign: campaign.to_owned(),
            name: recorded.name.clone(),
            recorded: recorded.version,
            asked: version,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned(version: u32) -> PinnedDefinition {
        PinnedDefinition {
            name: "digest".into(),
            version,
        }
    }

    fn asked(name: &str, version: Option<u32>) -> AskedDefinition {
        AskedDefinition {
            name: name.into(),
            version,
        }
    }

    const C: &str = "digest-2026-W48";

    #[test]
    fn a_first_run_uses_what_it_names_or_the_latest() {
        assert_eq!(settle(C, None, None, false), Ok(Settled::BuiltIn));
        assert_eq!(
            settle(C, None, Some(&asked("digest", None)), false),
            Ok(Settled::Latest("digest".into()))
        );
        assert_eq!(
            settle(C, None, Some(&asked("digest", Some(2))), false),
            Ok(Settled::Use(pinned(2)))
        );
    }

    #[test]
    fn a_later_run_keeps_the_pinned_version() {
        for ask in [
            None,
            Some(asked("digest", None)),
            Some(asked("digest", Some(2))),
        ] {
            assert_eq!(
                settle(C, Some(&pinned(2)), ask.as_ref(), false),
                Ok(Settled::Use(pinned(2))),
                "{ask:?}"
            );
        }
    }

    #[test]
    fn another_version_is_refused_unless_asked_for_with_repin() {
        let err = settle(C, Some(&pinned(2)), Some(&asked("digest", Some(3))), false).unwrap_err();
        assert_eq!(err.to_string(), "campaign digest-2026-W48 is pinned to version 2 of definition digest, and version 3 was asked for: leave the version out to keep 2, or ask for version 3 with repin (mailctl: --repin) to run the rest with it");
        assert_eq!(
            settle(C, Some(&pinned(2)), Some(&asked("digest", Some(3))), true),
            Ok(Settled::Repin {
                from: pinned(2),
                to: pinned(3)
            })
        );
        // Repin says which version; the same one is no change.
        assert_eq!(
            settle(C, Some(&pinned(2)), Some(&asked("digest", None)), true),
            Err(PinError::RepinWithoutVersion)
        );
        assert_eq!(
            settle(C, Some(&pinned(2)), Some(&asked("digest", Some(2))), true),
            Ok(Settled::Use(pinned(2)))
        );
        assert!(matches!(
            settle(C, Some(&pinned(2)), None, true),
            Err(PinError::RepinWithoutDefinition { .. })
        ));
        assert_eq!(
            settle(C, None, None, true),
            Err(PinError::RepinWithoutVersion)
        );
    }

    #[test]
    fn a_campaign_never_changes_definition() {
        let err = settle(C, Some(&pinned(2)), Some(&asked("promo", Some(2))), true).unwrap_err();
        assert!(matches!(err, PinError::OtherDefinition { .. }));
        assert!(err.to_string().contains("start a new campaign id"), "{err}");
    }
}
