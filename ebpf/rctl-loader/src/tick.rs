//! The kernel tick the program's default clock counts in.

use crate::error::{ErrorKind, LoaderError};

/// The kernel's tick in ns (`TICK_NSEC`: the resolution of
/// CLOCK_MONOTONIC_COARSE) and the jiffies value at which the tick clock
/// reads 0, chosen so that it follows CLOCK_MONOTONIC (to within a tick):
/// from /proc/timer_list's `now at` and `jiffies:` (one read), else the
/// kernel's `INITIAL_JIFFIES` (300 s before the 32-bit wrap; the clock
/// then runs some 0.2 s behind, the boot time before the first tick).
pub fn kernel_tick() -> Result<(u64, u64), LoaderError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let tick = u64::try_from(ts.tv_nsec).unwrap_or(0);
    if rc != 0 || ts.tv_sec != 0 || tick == 0 {
        return Err(LoaderError::new(
            ErrorKind::Clock,
            "cannot read the kernel tick (clock_getres(CLOCK_MONOTONIC_COARSE)); \
             apply with --clock exact",
        ));
    }
    let base = match crate::host::timer_list() {
        Some((now, Some(jiffies))) => jiffies.wrapping_sub(now / tick),
        _ => {
            let hz = (1_000_000_000 + tick / 2) / tick;
            u64::from((hz as u32).wrapping_mul(300).wrapping_neg())
        }
    };
    Ok((tick, base))
}
