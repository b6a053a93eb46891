//! Every atomic of the library goes through `src/sync.rs`, so that loom sees them all.
#[test]
fn no_module_but_the_shim_names_std_atomics() {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut offenders = Vec::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "sync.rs" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            if code.contains("std::sync::atomic") || code.contains("core::sync::atomic") {
                offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "atomics that bypass src/sync.rs:\n{}",
        offenders.join("\n")
    );
}
