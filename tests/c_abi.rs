//! The C ABI as a C program uses it: `tests/c/pool_bound.c`, compiled against the
//! checked-in header and linked with the cdylib, forks workers and checks the pool
//! bound, the typed errors, an explanation, statistics and a cancelled wait.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The directory holding `libfairshm.so` of this build (next to `deps/`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

#[test]
fn a_c_program_forks_workers_that_keep_the_pool_bound() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = lib_dir();
    assert!(
        dir.join("libfairshm.so").exists(),
        "the cdylib is built beside the tests: {}",
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
    let mut child = Command::new(&out).arg(&seg.name).spawn().expect("run it");
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
