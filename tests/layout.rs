//! The source tree's map holds: no import cycle among the rooms (top-level modules) of
//! `shared/src/domain`, `shared/src/adapters` and `infra/mailctl/src`, so that each can be
//! read, and changed, from the ones it imports. Read from the sources as text: a module's
//! imports are the paths it names (`crate::domain::x`, `super::x`), its tests left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each room of `dir`: a file `x.rs`, or a folder `x/` (with its `x.rs` beside it, if any),
/// and every source file in it with its depth below `dir`.
fn rooms(dir: &Path) -> BTreeMap<String, Vec<(PathBuf, usize)>> {
    let mut rooms: BTreeMap<String, Vec<(PathBuf, usize)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            walk(&path, 1, rooms.entry(name).or_default());
        } else if path.extension().is_some_and(|e| e == "rs")
            && !["mod", "lib", "main"].contains(&name.as_str())
        {
            rooms.entry(name).or_default().push((path, 0));
        }
    }
    rooms
}

fn walk(dir: &Path, depth: usize, files: &mut Vec<(PathBuf, usize)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                walk(&path, depth + 1, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            // A folder's mod.rs speaks for the folder: `super` from it is one level up.
            let own = path.file_name().is_some_and(|n| n == "mod.rs");
            files.push((path, if own { depth - 1 } else { depth }));
        }
    }
}

/// The rooms a source names, through any of `prefixes` or `super::` enough times to reach
/// the rooms' level (`depth`: how far below them the file is).
fn named(
    source: &str,
    depth: usize,
    prefixes: &[&str],
    rooms: &BTreeSet<String>,
) -> BTreeSet<String> {
    // Its tests (a `#[cfg(test)] mod` at the end) and its comments name nothing.
    let code = source.split("#[cfg(test)]\nmod ").next().unwrap_or(source);
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let up = "super::".repeat(depth + 1);
    let mut found = BTreeSet::new();
    for prefix in prefixes.iter().map(|p| format!("{p}::")).chain([up]) {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(&prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for path in paths(rest) {
                let name: String = path
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if rooms.contains(&name) {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// The paths at the start of `rest`: one (`x::y`), or each of a group's (`{x::y, z}`).
fn paths(rest: &str) -> Vec<&str> {
    let Some(inner) = rest.strip_prefix('{') else {
        return vec![rest];
    };
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(&inner[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// A cycle among the rooms of `dir` (as a path of names), if any.
fn cycle(dir: &Path, prefixes: &[&str]) -> Option<Vec<String>> {
    let rooms = rooms(dir);
    let names: BTreeSet<String> = rooms.keys().cloned().collect();
    let imports: BTreeMap<&String, BTreeSet<String>> = rooms
        .iter()
        .map(|(room, files)| {
            let mut all = BTreeSet::new();
            for (file, depth) in files {
                let is_test = file.file_name().is_some_and(|n| n == "tests.rs");
                if !is_test {
                    let source = std::fs::read_to_string(file).unwrap();
                    all.extend(named(&source, *depth, prefixes, &names));
                }
            }
            all.remove(room);
            (room, all)
        })
        .collect();
    fn reach(
        from: &String,
        path: &mut Vec<String>,
        imports: &BTreeMap<&String, BTreeSet<String>>,
        seen: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        for next in &imports[from] {
            if *next == path[0] {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if let Some(cycle) = reach(next, path, imports, seen) {
                    return Some(cycle);
                }
                path.pop();
            }
        }
        None
    }
    names.iter().find_map(|start| {
        reach(
            start,
            &mut vec![start.clone()],
            &imports,
            &mut BTreeSet::new(),
        )
    })
}

#[test]
fn no_import_cycle_among_the_rooms_of_the_domain_the_adapters_and_mailctl() {
    for (dir, prefixes) in [
        ("shared/src/domain", &["crate::domain"][..]),
        ("shared/src/adapters", &["crate::adapters"][..]),
        ("infra/mailctl/src", &["crate", "mailctl"][..]),
    ] {
        assert_eq!(
            cycle(&root().join(dir), prefixes),
            None,
            "an import cycle in {dir}"
        );
    }
}

#[test]
fn the_check_finds_a_cycle_through_a_folders_file() {
    let dir = std::env::temp_dir().join(format!("mailflow-layout-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("digest")).unwrap();
    std::fs::write(
        dir.join("digest/values.rs"),
        "use crate::domain::picks::P;\n",
    )
    .unwrap();
    std::fs::write(dir.join("picks.rs"), "use super::digest::printable;\n").unwrap();
    std::fs::write(dir.join("text.rs"), "use super::digest::printable;\n").unwrap();
    let found = cycle(&dir, &["crate::domain"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        Some(["digest", "picks", "digest"].map(String::from).to_vec())
    );
}

#[test]
fn imports_are_read_by_path_group_and_super_and_not_from_tests_or_comments() {
    let rooms: BTreeSet<String> = ["digest", "open_content"].map(String::from).into();
    let picks = "use crate::domain::digest::printable_name;\nuse super::super::open_content::X;";
    assert_eq!(
        named(picks, 1, &["crate::domain"], &rooms),
        rooms,
        "both names, by path and by super"
    );
    let grouped = "use crate::domain::{campaign::{A, B}, digest::Digest, open_content};";
    assert_eq!(named(grouped, 0, &["crate::domain"], &rooms), rooms);
    let commented =
        "// crate::domain::digest\n#[cfg(test)]\nmod tests {\nuse crate::domain::open_content;";
    assert!(named(commented, 0, &["crate::domain"], &rooms).is_empty());
}
