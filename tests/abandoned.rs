//! A creator killed before it marked its segment ready leaves a file that no open can
//! accept. `open_or_create` replaces it once the creator is gone (its `flock` free),
//! and leaves it alone while a process holds that lock; starters racing for it all end
//! on one new segment; a file that is not fairshm's is never touched.
mod common;

use common::{Children, Seg, fork_child, one_pool, wait, wait_until};
use fairshm::segment::path_of;
use fairshm::{Error, Outcome, Table};

/// A child that dies (SIGKILL) at creation step `label` of segment `name`.
fn die_creating(name: &str, label: &'static str) {
    let name = name.to_owned();
    let kid = fork_child(move || {
        fairshm::crash::arm(label, 0);
        let _ = Table::create(&name, &one_pool(4));
        0 // not reached: the crash point kills the child
    });
    assert_eq!(
        wait(kid),
        128 + libc::SIGKILL,
        "the creator died at {label}"
    );
}

/// The table works: a grant and its release.
fn works(t: &Table) {
    let e = t.engine();
    let (p, a) = (e.pool("requests").unwrap(), e.tenant("acme").unwrap());
    let Outcome::Granted(id) = e.acquire(p, a, 1, 0, 1).unwrap() else {
        panic!("a fresh pool of 4 grants")
    };
    e.release(id, 1).unwrap();
}

#[test]
fn a_dead_creators_segment_is_replaced_by_open_or_create() {
    for &label in fairshm::crash::CREATE_LABELS {
        let seg = Seg::new("abandoned");
        die_creating(&seg.name, label);
        let before = std::fs::metadata(path_of(&seg.name)).expect("the leftover file");
        let e = Table::open(&seg.name).err().expect("never ready");
        assert!(
            matches!(
                e,
                Error::NotReady { .. } | Error::BadMagic { found: 0, .. } | Error::Truncated { .. }
            ),
            "{label}: {e}"
        );
        let t = Table::open_or_create(&seg.name, &one_pool(4))
            .unwrap_or_else(|e| panic!("{label}: the leftover is replaced, not {e}"));
        use std::os::unix::fs::MetadataExt;
        let after = std::fs::metadata(path_of(&seg.name)).unwrap();
        assert_ne!(before.ino(), after.ino(), "{label}: a new file");
        works(&t);
        // And it is an ordinary segment now: others open it.
        works(&Table::open(&seg.name).unwrap());
    }
}

#[test]
fn a_never_ready_segment_whose_creator_is_at_work_is_left_alone() {
    let seg = Seg::new("abandoned-held");
    die_creating(&seg.name, "create.written");
    let path = path_of(&seg.name);
    let bytes = std::fs::read(&path).unwrap();
    // A live process holds the file's lock, as a creator at work (or one stopped by a
    // debugger) does until `ready`: not abandoned.
    let held = common::shared_words(1);
    let mut kids = Children(vec![fork_child(|| {
        let f = std::fs::File::open(path_of(&seg.name)).unwrap();
        let _locked = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
        held[0].store(1, std::sync::atomic::Ordering::SeqCst);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    })]);
    wait_until(
        Some(kids[0]),
        "the child locking the file",
        std::time::Duration::from_millis(1),
        || held[0].load(std::sync::atomic::Ordering::SeqCst) == 1,
    );
    let e = Table::open_or_create(&seg.name, &one_pool(4))
        .err()
        .expect("held");
    assert!(matches!(e, Error::NotReady { .. }), "{e}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the held file is untouched"
    );
    assert_eq!(
        fairshm::segment::remove_if_never_ready(&seg.name).unwrap(),
        fairshm::segment::Abandoned::Held(vec![kids[0].as_raw() as u32]),
        "the holder is named"
    );
    // Once its holder is gone, it is replaced.
    assert_eq!(kids.kill_all(), vec![128 + libc::SIGKILL]);
    works(&Table::open_or_create(&seg.name, &one_pool(4)).unwrap());
}

#[test]
fn a_file_that_is_not_fairshms_is_never_replaced() {
    let seg = Seg::new("abandoned-junk");
    let path = path_of(&seg.name);
    let junk: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, &junk).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = Table::open_or_create(&seg.name, &one_pool(4))
        .err()
        .expect("not ours");
    assert!(matches!(e, Error::BadMagic { .. }), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), junk);
    // A ready segment of another config is a mismatch, never replaced either.
    let other = Seg::new("abandoned-config");
    drop(other.create(&one_pool(8)));
    let e = Table::open_or_create(&other.name, &one_pool(4))
        .err()
        .expect("mismatch");
    assert!(matches!(e, Error::ConfigMismatch { .. }), "{e}");
    assert_eq!(Table::open(&other.name).unwrap().config(), &one_pool(8));
}

#[test]
fn starters_racing_for_a_leftover_all_end_on_one_segment() {
    use std::sync::atomic::Ordering::SeqCst;
    let seg = Seg::new("abandoned-race");
    die_creating(&seg.name, "create.written");
    // words: [0] go, [1] opened, [2] grants, [3] refusals, [4] done.
    let w = common::shared_words(5);
    const STARTERS: u64 = 4;
    let mut kids = Children(
        (0..STARTERS)
            .map(|k| {
                let name = seg.name.clone();
                fork_child(move || {
                    while w[0].load(SeqCst) == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                    let cfg = one_pool(2);
                    let t = match Table::open_or_create(&name, &cfg) {
                        Ok(t) => t,
                        Err(e) => {
                            eprintln!("starter {k}: {e}");
                            return 1;
                        }
                    };
                    w[1].fetch_add(1, SeqCst);
                    while w[1].load(SeqCst) < STARTERS {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                    // Each its own tenant in one pool of 2: on one segment, two grants.
                    let e = t.engine();
                    let (p, a) = (
                        e.pool("requests").unwrap(),
                        e.tenant(&format!("t{k}")).unwrap(),
                    );
                    match e.acquire(p, a, 1, 0, 1).unwrap() {
                        Outcome::Granted(_) => w[2].fetch_add(1, SeqCst),
                        Outcome::Refused(_) => w[3].fetch_add(1, SeqCst),
                    };
                    while w[4].load(SeqCst) == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    0
                })
            })
            .collect(),
    );
    w[0].store(1, SeqCst);
    wait_until(
        None,
        "every starter's try",
        std::time::Duration::from_millis(1),
        || w[2].load(SeqCst) + w[3].load(SeqCst) == STARTERS,
    );
    assert_eq!(
        (w[2].load(SeqCst), w[3].load(SeqCst)),
        (2, 2),
        "all four on one segment: two grants of a pool of 2, two refusals"
    );
    w[4].store(1, SeqCst);
    assert_eq!(kids.wait_all(), vec![0; STARTERS as usize]);
}
