//! The C ABI as a C program uses it: `tests/c/pool_bound.c`, compiled against the
//! checked-in header and linked with the cdylib, forks workers and checks the pool
//! bound, the typed errors, an explanation, statistics and a cancelled wait;
//! `tests/c/guaranteed_wait.c` waits on a guaranteed pool; and the README's C quick
//! start, compiled and run as it stands there.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
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

/// Compiles the C source `src` against the checked-in header, linked with the cdylib
/// in `dir`, into `out`.
fn compile(root: &Path, dir: &Path, src: &Path, out: &Path) {
    let cc = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root.join("include"))
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lfairshm", "-lpthread"])
        .status()
        .expect("run cc");
    assert!(
        cc.success(),
        "{} compiles against include/fairshm.h",
        src.display()
    );
}

/// Runs the program `exe` with `args` (its stdout into `stdout`, if given) against the
/// library in `dir`, and returns its exit status; fails the test after 90 s.
fn run(exe: &Path, args: &[&str], dir: &Path, stdout: Option<&Path>) -> ExitStatus {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    if let Some(path) = stdout {
        cmd.stdout(Stdio::from(std::fs::File::create(path).unwrap()));
    }
    // The library it loads is the one just built: `cargo test` runs tests with
    // `LD_LIBRARY_PATH` naming `target/release`, which the dynamic loader searches
    // before the program's run path, and there it would find whatever library the
    // last `cargo build --release` left (a program that passed against a stale library).
    let mut child = cmd.env("LD_LIBRARY_PATH", dir).spawn().expect("run it");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish in 90 s", exe.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Compiles `tests/c/{program}.c` and runs it with a segment name of its own (removed
/// after it), and fails unless every check of the program held.
fn run_c_test(program: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = lib_dir(root);
    assert!(
        dir.join("libfairshm.so").exists(),
        "the cdylib is built in {}",
        dir.display()
    );
    let out = dir.join(format!("{program}-{}", std::process::id()));
    compile(root, &dir, &root.join(format!("tests/c/{program}.c")), &out);
    let seg = common::Seg::new(&format!("c-abi-{program}"));
    let status = run(&out, &[&seg.name], &dir, None);
    let _ = std::fs::remove_file(&out);
    assert!(status.success(), "{program}.c's checks: {status}");
}

#[test]
fn a_c_program_forks_workers_that_keep_the_pool_bound() {
    run_c_test("pool_bound");
}

/// `tests/c/guaranteed_wait.c`: a guaranteed pool's blocking acquire in one call, woken
/// by a release in another thread, ended by a cancel and by its timeout.
#[test]
fn a_c_program_waits_on_a_guaranteed_pool() {
    run_c_test("guaranteed_wait");
}

/// The first C block of the README's section on the C ABI.
fn readme_c_block(root: &Path) -> String {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split_once("## The C ABI")
        .expect("the README has a section on the C ABI")
        .1;
    let block = section.split_once("```c\n").expect("it has a C block").1;
    block
        .split_once("```")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn the_readme_c_quick_start_compiles_and_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = lib_dir(root);
    let seg = common::Seg::new("c-quickstart");
    let code = readme_c_block(root);
    assert!(
        code.contains("\"myapp-fairshm-c\""),
        "the block names its segment"
    );
    // Its own segment name, so that tests running at once do not share one.
    let code = code.replace("\"myapp-fairshm-c\"", &format!("{:?}", seg.name));
    let tag = format!("quickstart-{}", std::process::id());
    let (src, exe, printed) = (
        dir.join(format!("{tag}.c")),
        dir.join(&tag),
        dir.join(format!("{tag}.out")),
    );
    std::fs::write(&src, code).unwrap();
    compile(root, &dir, &src, &exe);
    let status = run(&exe, &[], &dir, Some(&printed));
    let out = std::fs::read_to_string(&printed).unwrap();
    for f in [&src, &exe, &printed] {
        let _ = std::fs::remove_file(f);
    }
    assert!(status.success(), "the quick start exits 0: {status}\n{out}");
    // It was granted (nothing refused it), released, and printed the stats JSON.
    let stats: serde_json::Value = serde_json::from_str(out.trim()).expect("stats JSON");
    let pool = &stats["pools"][0];
    assert_eq!(pool["name"], "requests", "{out}");
    assert_eq!(
        (pool["grants"].as_u64(), pool["in_use"].as_u64()),
        (Some(1), Some(0)),
        "{out}"
    );
    // And it removed its segment.
    assert!(
        matches!(
            fairshm::Table::open(&seg.name),
            Err(fairshm::Error::NotFound { .. })
        ),
        "the quick start unlinks its segment"
    );
}
