//! Campaign definitions on disk: a folder read with the limits every definition obeys
//! (`read_dir`), checked offline (`check`, what `mailctl campaign check` prints), and the
//! JSON Schema of campaign.toml (`schema`, docs/campaign.schema.json).

use mailflow::domain::definition::files::{self, MAX_BYTES, MAX_FILES};
use mailflow::domain::definition::{Definition, Files};
use std::path::Path;

/// A definition's files read from `dir`: regular files only (a symlink is refused, wherever
/// it points), no hidden names, UTF-8, at most `MAX_FILES` and `MAX_BYTES` in all (reading
/// stops there, whatever the folder holds). Every problem is one line naming the file.
pub fn read_dir(dir: &Path) -> Result<Files, Vec<String>> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        vec![format!(
            "{}: {e}; name the definition's folder",
            dir.display()
        )]
    })?;
    if !meta.is_dir() {
        return Err(vec![format!(
            "{}: not a folder; name the folder that holds campaign.toml",
            dir.display()
        )]);
    }
    let mut reader = Reader {
        files: Files::new(),
        errors: Vec::new(),
        bytes: 0,
        seen: 0,
    };
    reader.walk(dir, "");
    if reader.errors.is_empty() {
        Ok(reader.files)
    } else {
        Err(reader.errors)
    }
}

struct Reader {
    files: Files,
    errors: Vec<String>,
    bytes: usize,
    /// Entries met so far (files and folders): the walk stops past the limit.
    seen: usize,
}

impl Reader {
    fn walk(&mut self, dir: &Path, prefix: &str) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                self.errors.push(format!("{}: {e}", display(prefix)));
                return;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            self.seen += 1;
            if self.seen > MAX_FILES * 2 {
                self.errors.push(format!(
                    "the folder holds more than {MAX_FILES} files; a definition has at most {MAX_FILES}: remove some"
                ));
                return;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                self.errors.push(format!(
                    "{}{}: a name that is not UTF-8; rename it (A-Z, a-z, 0-9, ., _ and -)",
                    prefix,
                    name.to_string_lossy()
                ));
                continue;
            };
            let path = format!("{prefix}{name}");
            let Ok(kind) = entry.file_type() else {
                self.errors.push(format!("{path}: unreadable"));
                continue;
            };
            if kind.is_symlink() {
                self.errors.push(format!(
                    "{path}: a symbolic link; copy the file into the definition instead"
                ));
                continue;
            }
            if kind.is_dir() {
                if let Some(why) = files::path_problem(&format!("{path}/x"))
                    .filter(|w| !w.starts_with("not a definition's file"))
                {
                    self.errors.push(format!("{path}/: {why}"));
                    continue;
                }
                self.walk(&entry.path(), &format!("{path}/"));
                continue;
            }
            if !kind.is_file() {
                self.errors
                    .push(format!("{path}: not a regular file; remove it"));
                continue;
            }
            if let Some(why) = files::path_problem(&path) {
                self.errors.push(format!("{path}: {why}"));
                continue;
            }
            if self.files.len() == MAX_FILES {
                self.errors.push(format!(
                    "the folder holds more than {MAX_FILES} files; a definition has at most {MAX_FILES}: remove some"
                ));
                return;
            }
            let size = entry.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
            if self.bytes as u64 + size > MAX_BYTES as u64 {
                self.errors.push(format!(
                    "{path}: past {} KiB in all; a definition's files hold at most that: make them smaller",
                    MAX_BYTES / 1024
                ));
                return;
            }
            match std::fs::read(entry.path()) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => {
                        self.bytes += text.len();
                        self.files.insert(path, text);
                    }
                    Err(_) => self
                        .errors
                        .push(format!("{path}: not UTF-8; save it as UTF-8")),
                },
                Err(e) => self.errors.push(format!("{path}: {e}")),
            }
        }
    }
}

fn display(prefix: &str) -> &str {
    if prefix.is_empty() {
        "."
    } else {
        prefix
    }
}

/// What `check` found in a good definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub name: String,
    pub languages: usize,
    pub data_queries: usize,
    pub skip_rules: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |count: usize, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        write!(
            f,
            "{}: OK ({}, {}, {})",
            self.name,
            n(self.languages, "language", "languages"),
            n(self.data_queries, "data query", "data queries"),
            n(self.skip_rules, "skip rule", "skip rules")
        )
    }
}

/// A definition checked offline: loaded (settings, queries, templates' layout), then every
/// sample rendered in every language and variant; the problems of both, one line each.
pub fn check(files: &Files) -> Result<Summary, Vec<String>> {
    checked(files).map(|definition| Summary {
        languages: definition.templates.languages.len(),
        data_queries: definition.data.len(),
        skip_rules: definition.skip.len(),
        name: definition.name,
    })
}

/// The definition `files` make, if it passes every check of `check`.
pub fn checked(files: &Files) -> Result<Definition, Vec<String>> {
    let definition = Definition::load(files)?;
    let problems = mailflow::domain::definition::render::check_samples(&definition, files);
    match problems.is_empty() {
        true => Ok(definition),
        false => Err(problems),
    }
}

/// The JSON Schema of campaign.toml (docs/campaign.schema.json).
pub fn schema() -> String {
    mailflow::domain::definition::campaign_toml::schema()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mailctl-definition-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_published_schema_is_current() {
        let path = crate::repo_root().join("docs/campaign.schema.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == schema(),
            "docs/campaign.schema.json is stale: run `cargo run -p mailctl -- campaign schema > docs/campaign.schema.json`"
        );
    }

    #[test]
    fn reads_a_folder_and_refuses_what_a_definition_cannot_hold() {
        let dir = folder("read");
        std::fs::create_dir_all(dir.join("templates/en")).unwrap();
        std::fs::write(dir.join("campaign.toml"), "name = \"x\"\n").unwrap();
        std::fs::write(dir.join("templates/en/subject.txt.j2"), "Hi").unwrap();
        let files = read_dir(&dir).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["campaign.toml", "templates/en/subject.txt.j2"]
        );

        std::fs::write(dir.join(".env"), "SECRET=1").unwrap();
        std::fs::write(dir.join("templates/en/bad name.j2"), "x").unwrap();
        std::fs::write(dir.join("templates/en/latin1.j2"), [0xe9u8, 0x20]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("templates/en/passwd.j2")).unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        let errors = read_dir(&dir).unwrap_err();
        let has = |start: &str| errors.iter().any(|e| e.starts_with(start));
        assert!(has(".env: a hidden name"), "{errors:?}");
        assert!(
            has("templates/en/bad name.j2: a name with characters"),
            "{errors:?}"
        );
        assert!(has("templates/en/latin1.j2: not UTF-8"), "{errors:?}");
        assert!(has("templates/en/passwd.j2: a symbolic link"), "{errors:?}");
        assert!(has("notes.txt: not a definition's file"), "{errors:?}");
        assert_eq!(errors.len(), 5, "{errors:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stops_at_the_limits() {
        let dir = folder("limits");
        std::fs::create_dir_all(dir.join("samples")).unwrap();
        for i in 0..=MAX_FILES {
            std::fs::write(dir.join(format!("samples/s{i:03}.json")), "{}").unwrap();
        }
        let errors = read_dir(&dir).unwrap_err();
        assert!(
            errors[0].starts_with("the folder holds more than 200 files"),
            "{errors:?}"
        );
        std::fs::remove_dir_all(dir.join("samples")).unwrap();
        std::fs::create_dir_all(dir.join("samples")).unwrap();
        std::fs::write(dir.join("samples/big.json"), "x".repeat(MAX_BYTES + 1)).unwrap();
        let errors = read_dir(&dir).unwrap_err();
        assert!(
            errors[0].starts_with("samples/big.json: past 300 KiB"),
            "{errors:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn summarises_in_one_line() {
        let s = Summary {
            name: "digest".into(),
            languages: 3,
            data_queries: 2,
            skip_rules: 1,
        };
        assert_eq!(
            s.to_string(),
            "digest: OK (3 languages, 2 data queries, 1 skip rule)"
        );
    }
}
