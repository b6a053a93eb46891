//! A safe open: no symlink is followed, only a regular file with a mode fairshm sets is
//! trusted, group modes let group members in, and a truncated segment is a typed
//! error instead of a SIGBUS wherever the library can tell.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{Seg, fork_child, one_pool, wait};
use fairshm::{Error, Table};

fn path(name: &str) -> String {
    format!("/dev/shm/{name}")
}

#[test]
fn a_symlink_at_the_path_is_refused_not_followed() {
    let seg = Seg::new("symlink");
    let target = std::env::temp_dir().join(format!("fairshm-target-{}", std::process::id()));
    std::fs::write(&target, vec![0u8; 4096]).unwrap();
    std::os::unix::fs::symlink(&target, path(&seg.name)).unwrap();
    for e in [
        Table::open(&seg.name).err().unwrap(),
        Table::open_or_create(&seg.name, &one_pool(4))
            .err()
            .unwrap(),
    ] {
        assert!(
            matches!(&e, Error::BadFile { why, .. } if why.contains("symbolic link")),
            "{e}"
        );
    }
    // The file it pointed at is untouched.
    assert_eq!(std::fs::read(&target).unwrap(), vec![0u8; 4096]);
    std::fs::remove_file(&target).unwrap();
}

#[test]
fn a_directory_or_fifo_at_the_path_is_not_a_segment() {
    let seg = Seg::new("fifo");
    nix::unistd::mkfifo(path(&seg.name).as_str(), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(&e, Error::BadFile { why, .. } if why.contains("not a regular file")),
        "{e}"
    );
}

#[test]
fn only_owner_and_group_read_write_modes_are_accepted_at_creation() {
    for bad in [0o4777, 0o666, 0o700, 0o400, 0o2660, 0o606] {
        let seg = Seg::new("mode");
        let e = Table::create_with_mode(&seg.name, &one_pool(4), bad)
            .err()
            .unwrap();
        assert!(matches!(e, Error::InvalidConfig(_)), "{bad:#o}: {e}");
        assert!(!std::path::Path::new(&path(&seg.name)).exists());
    }
    for good in [0o600, 0o640, 0o660] {
        let seg = Seg::new("mode");
        drop(Table::create_with_mode(&seg.name, &one_pool(4), good).unwrap());
        let m = std::fs::metadata(path(&seg.name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(m & 0o7777, good);
    }
}

#[test]
fn a_file_with_bits_fairshm_never_sets_is_refused_on_open() {
    let seg = Seg::new("oddmode");
    drop(seg.create(&one_pool(4)));
    std::fs::set_permissions(path(&seg.name), std::fs::Permissions::from_mode(0o4666)).unwrap();
    let e = Table::open(&seg.name).err().unwrap();
    assert!(matches!(e, Error::BadFile { .. }), "{e}");
}

#[test]
fn a_group_mode_lets_a_group_member_open_and_an_owner_mode_does_not() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root to become another user");
        return;
    }
    for (mode, ok) in [(0o660, true), (0o600, false)] {
        let seg = Seg::new("group");
        drop(Table::create_with_mode(&seg.name, &one_pool(4), mode).unwrap());
        let gid = 23_456;
        nix::unistd::chown(path(&seg.name).as_str(), None, Some(gid.into())).unwrap();
        let name = seg.name.clone();
        let child = fork_child(move || {
            // Another user, in the file's group.
            nix::unistd::setgroups(&[gid.into()]).unwrap();
            nix::unistd::setgid(gid.into()).unwrap();
            nix::unistd::setuid(34_567.into()).unwrap();
            match Table::open(&name) {
                Ok(_) => 0,
                // Refused by us, or by the kernel before us (no group permission).
                Err(Error::WrongOwner { .. }) => 3,
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    3
                }
                Err(e) => {
                    eprintln!("{e}");
                    4
                }
            }
        });
        assert_eq!(wait(child), if ok { 0 } else { 3 }, "mode {mode:#o}");
    }
}

/// Whether every anchor thread of this process sleeps (state `S` in its
/// `/proc/self/task/*/stat`), and there is one.
fn anchors_asleep() -> bool {
    let mut found = false;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "fairshm-anchor" {
            continue;
        }
        found = true;
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state is the first field after the `)` that ends the command.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if state != Some('S') {
            return false;
        }
    }
    found
}

#[test]
fn a_truncated_segment_is_a_typed_error_and_its_users_survive() {
    let seg = Seg::new("trunc");
    let t = seg.create(&one_pool(4));
    // Registered: our anchor thread watches peers and sweeps every second; it must not
    // touch the missing pages either.
    t.register().unwrap();
    // The anchor checks the size before each pass over the slots, and a truncation
    // during a pass can still raise SIGBUS (the README's trust model: whoever can write
    // the segment is trusted). Its first pass runs just after `register` returns, so
    // truncate once it sleeps: seen asleep, and again 20 ms later (a CI run of
    // 2026-12-03 truncated during that pass). It sleeps until its sweep, a second on.
    common::wait_until(
        None,
        "the anchor asleep",
        Duration::from_millis(2),
        anchors_asleep,
    );
    std::thread::sleep(Duration::from_millis(20));
    common::wait_until(
        None,
        "the anchor asleep",
        Duration::from_millis(2),
        anchors_asleep,
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path(&seg.name))
        .unwrap();
    f.set_len(4096).unwrap();
    for e in [
        t.try_snapshot().err().unwrap(),
        t.reap_dead().err().unwrap(),
        t.check().err().unwrap(),
        t.repair().err().unwrap(),
        Table::open(&seg.name).err().unwrap(),
    ] {
        assert!(matches!(e, Error::Truncated { .. }), "{e}");
    }
    // Over a sweep of the anchor: still alive (a SIGBUS would end this process).
    std::thread::sleep(Duration::from_millis(1200));
    drop(t);
}
