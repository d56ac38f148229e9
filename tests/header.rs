//! The checked-in C header must be what cbindgen generates from the sources, and carry
//! the version in Cargo.toml.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn checked_in_header() -> String {
    std::fs::read_to_string(root().join("include/mdloader.h")).expect("include/mdloader.h exists")
}

#[test]
fn header_is_up_to_date() {
    let fresh = std::env::temp_dir().join(format!("mdloader-header-{}.h", std::process::id()));
    let status = Command::new(root().join("scripts/gen-header.sh"))
        .arg(&fresh)
        .status()
        .expect("scripts/gen-header.sh runs (needs cbindgen: cargo install cbindgen --locked)");
    assert!(status.success(), "cbindgen failed");
    let generated = std::fs::read_to_string(&fresh).expect("cbindgen wrote the header");
    let _ = std::fs::remove_file(&fresh);
    assert!(
        generated == checked_in_header(),
        "include/mdloader.h is stale: run scripts/gen-header.sh and commit the result"
    );
}

#[test]
fn header_version_matches_cargo_toml() {
    let header = checked_in_header();
    let define = |name: &str| -> String {
        let prefix = format!("#define {name} ");
        header
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("the header defines {name}"))
            .trim()
            .to_string()
    };
    let version = format!(
        "{}.{}.{}",
        define("MDL_VERSION_MAJOR"),
        define("MDL_VERSION_MINOR"),
        define("MDL_VERSION_PATCH")
    );
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
}
