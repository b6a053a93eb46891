//! The C ABI as a C program uses it: `tests/c/pool_bound.c`, compiled against the
//! checked-in header and linked with the cdylib, forks workers and checks the pool
//! bound, the typed errors, an explanation, statistics and a cancelled wait.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Builds the cdylib from the current sources (`cargo test` builds only the rlib) in a
/// target directory of its own, and returns the directory holding `libfairshm.so`.
fn lib_dir(root: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().join("c-abi");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--release", "--lib", "--quiet", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("run cargo");
    assert!(built.success(), "cargo builds the cdylib");
    target.join("release")
}

#[test]
fn a_c_program_forks_workers_that_keep_the_pool_bound() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = lib_dir(root);
    assert!(
        dir.join("libfairshm.so").exists(),
        "the cdylib is built in {}",
        dir.display()
    );
    let out = dir.join(format!("pool_bound-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c/pool_bound.c"))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lfairshm", "-lpthread"])
        .status()
        .expect("run cc");
    assert!(
        cc.success(),
        "the C program compiles against include/fairshm.h"
    );

    let seg = common::Seg::new("c-abi");
    // The library it loads is the one just built: `cargo test` runs tests with
    // `LD_LIBRARY_PATH` naming `target/release`, which the dynamic loader searches
    // before the program's run path, and there it would find whatever library the
    // last `cargo build --release` left (a program that passed against a stale library).
    let mut child = Command::new(&out)
        .arg(&seg.name)
        .env("LD_LIBRARY_PATH", &dir)
        .spawn()
        .expect("run it");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the C program did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_file(&out);
    assert!(status.success(), "the C program's checks: {status}");
}
