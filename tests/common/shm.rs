//! Helpers for tests and benches (included by both): memory shared across fork, and
//! knobs read from the environment.

/// The environment variable `name` parsed, or `default` if unset or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `n` zeroed u64 words in an anonymous `MAP_SHARED` mapping, which forked children
/// share with the parent (memmap2's anonymous maps are private across fork). Never
/// unmapped: the test process ends soon after.
pub fn shared_words(n: usize) -> &'static [std::sync::atomic::AtomicU64] {
    let bytes = (n * 8).max(1);
    // SAFETY: a fresh anonymous shared mapping of `bytes` bytes; it is never unmapped,
    // is zero-filled, page-aligned, and only accessed through atomics.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        std::slice::from_raw_parts(p as *const std::sync::atomic::AtomicU64, n)
    }
}
