//! The settings' documentation cannot drift from the code: every `MDL_*` environment
//! variable the library reads (its environment lookups in `src/`) is listed in
//! docs/configuration.md, on its own line of the README's settings table and in the
//! header's list of settings (`include/mdloader.h`, generated from `src/ffi`);
//! docs/configuration.md lists none that the library does not read, and marks as agreed
//! exactly the settings `Config::settings` (src/config.rs) agrees at `mdl_init`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Environment variables the library reads for its own tests only: documented in
/// docs/configuration.md's "Test hooks", not settings of the README or the header.
const TEST_HOOKS: &[&str] = &["MDL_TEST_PERTURB_MODEL", "MDL_FAULT_ALLOC_AT"];

/// The calls through which `src/` reads the environment, each with the variable's name
/// as its first argument (config.rs's helpers and std's).
const LOOKUPS: &[&str] = &[
    "env_text(",
    "env_or(",
    "env_word(",
    "env::var(",
    "env::var_os(",
    "var_os(",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn name_at(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
        .collect()
}

/// The string literal `"MDL_..."` that opens `text` (after blanks), if any.
fn leading_setting(text: &str) -> Option<String> {
    let rest = text.trim_start().strip_prefix('"')?;
    let name = name_at(rest);
    (name.starts_with("MDL_") && rest[name.len()..].starts_with('"')).then_some(name)
}

/// Every `MDL_*` name that src/ passes to an environment lookup.
fn read_by_the_library() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = read(&file);
        for call in LOOKUPS {
            for (at, _) in text.match_indices(call) {
                if let Some(name) = leading_setting(&text[at + call.len()..]) {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The settings that `Config::settings` agrees across ranks (`Setting::identical("...")`,
/// `Setting::float("...")` in src/config.rs).
fn agreed_by_the_library() -> BTreeSet<String> {
    let text = read(&root().join("src/config.rs"));
    let mut names = BTreeSet::new();
    for call in ["Setting::identical(", "Setting::float("] {
        for (at, _) in text.match_indices(call) {
            if let Some(name) = leading_setting(&text[at + call.len()..]) {
                names.insert(name);
            }
        }
    }
    names
}

/// The table rows that open with a variable, "| `MDL_X` | ...": (name, row).
fn table_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("| `")?;
            let name = name_at(rest);
            (name.starts_with("MDL_") && rest[name.len()..].starts_with("` |"))
                .then(|| (name, line.to_string()))
        })
        .collect()
}

/// The settings: what the library reads, but its test hooks.
fn settings() -> BTreeSet<String> {
    let read = read_by_the_library();
    assert!(
        read.len() >= 20,
        "found only {} variables read in src/: has the way settings are read changed? {read:?}",
        read.len()
    );
    read.into_iter()
        .filter(|n| !TEST_HOOKS.contains(&n.as_str()))
        .collect()
}

#[test]
fn every_setting_is_in_docs_configuration_and_no_other() {
    let doc = read(&root().join("docs/configuration.md"));
    let rows: BTreeSet<String> = table_rows(&doc).into_iter().map(|(name, _)| name).collect();
    let read = read_by_the_library();
    assert!(
        read.len() >= 20,
        "found only {} variables read in src/: has the way settings are read changed? {read:?}",
        read.len()
    );
    let missing: Vec<_> = read.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no row for {missing:?}, which src/ reads"
    );
    let unknown: Vec<_> = rows.difference(&read).collect();
    assert!(
        unknown.is_empty(),
        "docs/configuration.md has rows for {unknown:?}, which src/ does not read"
    );
}

#[test]
fn docs_configuration_marks_the_agreed_settings() {
    let doc = read(&root().join("docs/configuration.md"));
    let agreed = agreed_by_the_library();
    assert!(
        agreed.len() >= 10,
        "only {agreed:?} in Config::settings (src/config.rs): has it changed?"
    );
    let settings = settings();
    for name in &agreed {
        assert!(
            settings.contains(name),
            "Config::settings agrees {name}, which src/ does not read from the environment"
        );
    }
    for (name, row) in table_rows(&doc) {
        if TEST_HOOKS.contains(&name.as_str()) {
            continue;
        }
        let marked = row.contains("| **agreed** |");
        let local = row.contains("| local |");
        assert!(
            marked != local,
            "docs/configuration.md's row of {name} says neither '**agreed**' nor 'local': {row}"
        );
        assert_eq!(
            marked,
            agreed.contains(&name),
            "docs/configuration.md marks {name} {}, but Config::settings (src/config.rs) {} it",
            if marked { "agreed" } else { "local" },
            if agreed.contains(&name) {
                "agrees"
            } else {
                "does not agree"
            }
        );
    }
}

#[test]
fn every_setting_has_a_line_in_the_readme() {
    let readme = read(&root().join("README.md"));
    let rows: BTreeSet<String> = table_rows(&readme)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let missing: Vec<_> = settings()
        .into_iter()
        .filter(|n| !rows.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's settings table has no line for {missing:?}"
    );
    let read = read_by_the_library();
    let unknown: Vec<_> = rows.iter().filter(|n| !read.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "README.md's settings table has lines for {unknown:?}, which src/ does not read"
    );
    assert!(
        readme.contains("(docs/configuration.md)"),
        "README.md does not link docs/configuration.md"
    );
}

#[test]
fn every_setting_is_in_the_header() {
    let header = read(&root().join("include/mdloader.h"));
    // The list: mdl_init's comment, from its paragraph on settings to the comment's end.
    const LIST: &str = "Settings are read from the environment";
    let start = header.find(LIST).unwrap_or_else(|| {
        panic!("include/mdloader.h has no paragraph '{LIST}...' (mdl_init's comment)")
    });
    let header = &header[start..start + header[start..].find("*/").expect("the comment ends")];
    let missing: Vec<_> = settings()
        .into_iter()
        .filter(|n| {
            // The name as a word: MDL_PROGRESS is not found inside MDL_PROGRESS_US.
            !header
                .match_indices(n.as_str())
                .any(|(at, _)| name_at(&header[at..]) == *n)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "include/mdloader.h's list of settings lacks {missing:?}: name them in the doc comment in src/ffi and run scripts/gen-header.sh"
    );
}
