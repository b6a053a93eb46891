//! Opening validates everything it will trust; each failure has its own typed error.
mod common;

use std::os::unix::fs::OpenOptionsExt;

use common::{Seg, one_pool};
use fairshm::segment::path_of;
use fairshm::{Config, Error, Table};

fn rewrite(seg: &Seg, offset: u64, bytes: &[u8]) {
    common::rewrite(&seg.name, offset, bytes)
}

#[test]
fn create_then_open_round_trips_and_open_or_create_reuses() {
    let seg = Seg::new("roundtrip");
    let cfg = Config::default();
    let a = seg.create(&cfg);
    let b = Table::open(&seg.name).unwrap();
    assert_eq!(b.config(), &cfg);
    let c = Table::open_or_create(&seg.name, &cfg).unwrap();
    assert_eq!(c.size(), a.size());
    let mode = std::fs::metadata(path_of(&seg.name)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    assert!(matches!(
        Table::create(&seg.name, &cfg),
        Err(Error::AlreadyExists { .. })
    ));
}

#[test]
fn a_missing_segment_is_not_found() {
    let e = Table::open("fairshm-test-does-not-exist").err().unwrap();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
}

#[test]
fn bad_names_are_rejected() {
    for name in ["", "a/b", "..", "x\0y"] {
        assert!(
            matches!(Table::open(name), Err(Error::InvalidName { .. })),
            "{name:?}"
        );
    }
}

#[test]
fn a_truncated_file_is_truncated() {
    let seg = Seg::new("trunc");
    let t = seg.create(&one_pool(8));
    let full = t.size() as u64;
    drop(t);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path_of(&seg.name))
        .unwrap();
    f.set_len(full - 64).unwrap();
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(e, Error::Truncated { need, .. } if need == full),
        "{e}"
    );
    f.set_len(10).unwrap();
    let e = Table::open(&seg.name).err().unwrap();
    assert!(matches!(e, Error::Truncated { size: 10, .. }), "{e}");
}

#[test]
fn a_bad_magic_is_bad_magic() {
    let seg = Seg::new("magic");
    drop(seg.create(&one_pool(8)));
    rewrite(&seg, 0, b"NOTFAIR!");
    let e = Table::open(&seg.name).err().unwrap();
    assert!(matches!(e, Error::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("magic"), "{e}");
}

#[test]
fn a_foreign_file_of_zeros_is_bad_magic_not_a_hang() {
    let seg = Seg::new("zeros");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path_of(&seg.name))
        .unwrap();
    f.set_len(4096).unwrap();
    let e = Table::open(&seg.name).err().unwrap();
    assert!(matches!(e, Error::BadMagic { found: 0, .. }), "{e}");
}

#[test]
fn another_layout_version_is_a_version_mismatch() {
    let seg = Seg::new("version");
    drop(seg.create(&one_pool(8)));
    rewrite(&seg, 8, &99u32.to_le_bytes());
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(
            e,
            Error::VersionMismatch {
                found: 99,
                expected: fairshm::layout::LAYOUT_VERSION,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("shmtool clean"),
        "says what to do: {e}"
    );
}

#[test]
fn a_segment_never_made_ready_is_not_ready() {
    let seg = Seg::new("ready");
    drop(seg.create(&one_pool(8)));
    rewrite(&seg, 12, &0u32.to_le_bytes()); // header.ready
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(e, Error::NotReady { creator_pid, .. } if creator_pid == std::process::id()),
        "{e}"
    );
}

#[test]
fn a_different_config_is_a_config_mismatch_naming_the_difference() {
    let seg = Seg::new("config");
    drop(seg.create(&one_pool(8)));
    let e = Table::open_expecting(&seg.name, &one_pool(16))
        .err()
        .unwrap();
    match &e {
        Error::ConfigMismatch { what, .. } => assert!(
            what == "pool \"requests\": capacity: the segment has 8, asked for 16",
            "{what}"
        ),
        other => panic!("expected ConfigMismatch, got {other}"),
    }
    assert!(
        e.to_string().contains("shmtool clean"),
        "says what to do: {e}"
    );
    let e = Table::open_or_create(&seg.name, &Config::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::ConfigMismatch { .. }), "{e}");
}

#[test]
fn a_corrupted_config_block_fails_its_checksum() {
    let seg = Seg::new("checksum");
    drop(seg.create(&one_pool(8)));
    rewrite(&seg, 64 + 32 + 48, &9u32.to_le_bytes()); // pool 0 capacity
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(e, Error::Corrupt(ref w) if w.contains("checksum")),
        "{e}"
    );
}

#[test]
fn a_segment_of_another_owner_is_wrong_owner() {
    let seg = Seg::new("owner");
    drop(seg.create(&one_pool(8)));
    let me = nix::unistd::geteuid().as_raw();
    let other = if me == 12345 { 12346 } else { 12345 };
    if nix::unistd::chown(&path_of(&seg.name), Some(other.into()), None).is_err() {
        // Without CAP_CHOWN the file cannot be given away; the check itself is still
        // covered by root runs (CI runs as root).
        eprintln!("skipping: cannot chown as uid {me}");
        return;
    }
    let e = Table::open(&seg.name).err().unwrap();
    assert!(
        matches!(e, Error::WrongOwner { owner, .. } if owner == other),
        "{e}"
    );
}

#[test]
fn an_invalid_config_is_refused_at_creation_and_leaves_no_file() {
    let seg = Seg::new("invalid");
    let e = Table::create(&seg.name, &one_pool(0)).err().unwrap();
    assert!(matches!(e, Error::InvalidConfig(_)), "{e}");
    assert!(!path_of(&seg.name).exists());
}

#[test]
fn a_region_directory_that_disagrees_with_the_config_is_corrupt() {
    let seg = Seg::new("dir");
    drop(seg.create(&one_pool(4)));
    let path = path_of(&seg.name);
    let mut bytes = std::fs::read(&path).unwrap();
    // Entry 5 (the leases) at 64 + 5 * 16; its offset field 4 bytes in.
    let at = 64 + 5 * 16 + 4;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let e = Table::open(&seg.name)
        .err()
        .expect("a moved region is refused");
    assert!(
        matches!(&e, Error::Corrupt(w) if w.contains("region directory entry 5")),
        "{e}"
    );
}

#[test]
fn a_full_dev_shm_is_a_typed_error_at_creation_not_a_sigbus_later() {
    // A child in a mount namespace of its own, with a 1 MiB tmpfs over /dev/shm: the
    // default segment (megabytes) does not fit. Sparse, it used to be created anyway,
    // and the first write to a page beyond the tmpfs's size raised SIGBUS.
    let kid = common::fork_child(|| {
        if !common::own_namespaces(0) || !common::mount_here(c"tmpfs", c"/dev/shm", c"size=1m") {
            return 77;
        }
        let name = "fairshm-test-full-shm";
        match Table::create(name, &Config::default()) {
            Err(Error::Io { op, source, .. })
                if op.contains("fallocate") && source.raw_os_error() == Some(libc::ENOSPC) =>
            {
                // Nothing left behind, and the message says what failed.
                i32::from(path_of(name).exists()) * 2
            }
            Err(e) => {
                eprintln!("unexpected: {e}");
                3
            }
            Ok(_) => 1,
        }
    });
    match common::wait(kid) {
        77 => eprintln!("SKIPPED: needs root (a mount namespace) to fill a tmpfs"),
        code => assert_eq!(
            code, 0,
            "1: created on a full tmpfs; 2: file left; 3: other error"
        ),
    }
}
