//! A memory hint for counting tables bound by cache misses: asking for the
//! lines a request will update before the work that precedes the update,
//! so that their misses overlap that work instead of following it.

/// Asks the processor to fetch `at`'s cache line (a hint: it changes
/// nothing, and does nothing on targets without one).
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the intrinsic needs SSE, which every x86-64 target has; a
    // prefetch reads nothing architecturally and cannot fault, and the
    // pointer comes from a reference.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((at as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
