//! A process of another pid namespace (a container sharing `/dev/shm` with the
//! server's) may observe a segment, but neither register in it nor reap it, and
//! `shmtool` neither reaps nor cleans it from there: the pids the segment holds mean
//! nothing there (an unanchored worker would be taken for dead, a master that only maps
//! the segment would not be seen at all), and its own pid would mean nothing to the
//! server's processes.
#[path = "common/cli.rs"]
mod cli;
mod common;

use cli::{code, shmtool};
use common::{Seg, fork_child, one_pool, wait};
use fairshm::{Error, Request, Table};

/// What a process of a new pid namespace gets from segment `name`: 0 if everything is
/// as it must be, else the number of the first check that failed.
fn from_a_foreign_namespace(name: &str) -> i32 {
    let is_foreign = |r: Result<_, Error>, what: &str| match r {
        Err(Error::ForeignPidNamespace {
            what: w,
            ours,
            theirs,
            ..
        }) => w == what && ours != theirs && ours != 0 && theirs != 0,
        _ => false,
    };
    let t = match Table::open(name) {
        Ok(t) => t,
        Err(_) => return 10, // opening is allowed
    };
    if !is_foreign(t.register().map(|_| ()), "registering a worker") {
        return 11;
    }
    if !is_foreign(
        t.try_acquire(&Request::new("requests", "acme")).map(|_| ()),
        "registering a worker",
    ) {
        return 12;
    }
    if !is_foreign(t.reap_dead().map(|_| ()), "reaping dead processes") {
        return 13;
    }
    let Ok(o) = Table::open_observer(name) else {
        return 14;
    };
    if o.try_snapshot().is_err() {
        return 15; // observing is allowed
    }
    if code(&shmtool(&["reap", name])) != 6 {
        return 16;
    }
    if code(&shmtool(&["clean", name, "--force"])) != 6 {
        return 17;
    }
    if code(&shmtool(&["repair", name])) != 6 {
        return 18;
    }
    0
}

#[test]
fn another_pid_namespace_observes_but_neither_registers_nor_reaps() {
    let seg = Seg::new("pidns");
    let t = seg.create(&one_pool(4));
    let name = seg.name.clone();
    // A live worker of this namespace holds a permit: from a container's view (its own
    // /proc), its pid is no process at all.
    let held = t
        .try_acquire(&Request::new("requests", "acme"))
        .unwrap()
        .expect("granted");
    let kid = fork_child(move || {
        if !common::own_namespaces(libc::CLONE_NEWPID) {
            return 77;
        }
        // The first child there is its pid 1; it mounts a /proc of its own, as a
        // container does.
        let inner = fork_child(|| {
            if !common::mount_here(c"proc", c"/proc", c"") {
                return 77;
            }
            from_a_foreign_namespace(&name)
        });
        wait(inner)
    });
    match wait(kid) {
        77 => {
            eprintln!("SKIPPED: needs root (a pid namespace) to be a foreign process");
            return;
        }
        code => assert_eq!(
            code, 0,
            "the check that failed (see from_a_foreign_namespace)"
        ),
    }
    // Nothing of the segment moved: only this process registered, its permit still
    // held (not reaped as a dead process's), the segment still here.
    let snap = t.snapshot();
    assert_eq!(snap.processes.len(), 1, "only this process registered");
    assert_eq!(
        snap.held("requests", "acme"),
        1,
        "the live worker's permit was not reaped"
    );
    assert!(std::path::Path::new(&format!("/dev/shm/{}", seg.name)).exists());
    drop(held);
    assert_eq!(t.snapshot().held("requests", "acme"), 0);
}
