//! Memory shared across fork, for tests and benches (included by both).

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
