//! Gives libmdloader.so a SONAME, so that programs linked against it record
//! `libmdloader.so.<major>` and installed copies can be versioned (CMake and pkg-config
//! consumers rely on it).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmdloader.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
