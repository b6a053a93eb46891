//! `include/fairshm.h` is what cbindgen makes of `src/ffi` now: this fails when the
//! checked-in header is stale. `FAIRSHM_BLESS=1` rewrites it instead.

use std::path::Path;

#[test]
fn the_checked_in_header_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen parses src/ffi")
        .write(&mut made);
    let made = String::from_utf8(made).expect("the header is UTF-8");
    let path = root.join("include/fairshm.h");
    if std::env::var_os("FAIRSHM_BLESS").is_some() {
        std::fs::create_dir_all(root.join("include")).unwrap();
        std::fs::write(&path, &made).unwrap();
        return;
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == made,
        "include/fairshm.h is stale: regenerate it with \
         `FAIRSHM_BLESS=1 cargo test --release --test header` and commit it"
    );
    for f in [
        "fairshm_open",
        "fairshm_try_acquire",
        "fairshm_release",
        "fairshm_explain",
    ] {
        assert!(made.contains(f), "the header declares {f}");
    }
}
