//! What the kernel says, kept in errors: errno names, and whole error
//! chains with the errno each I/O error carries.

use std::error::Error;
use std::io;

/// The symbolic name of an errno value, for the errors the bpf(2) and
/// file calls rctl makes can return.
pub fn name(n: i32) -> Option<&'static str> {
    const NAMES: &[(i32, &str)] = &[
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::ESRCH, "ESRCH"),
        (libc::EINTR, "EINTR"),
        (libc::EIO, "EIO"),
        (libc::ENXIO, "ENXIO"),
        (libc::E2BIG, "E2BIG"),
        (libc::EBADF, "EBADF"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EACCES, "EACCES"),
        (libc::EFAULT, "EFAULT"),
        (libc::EBUSY, "EBUSY"),
        (libc::EEXIST, "EEXIST"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENODEV, "ENODEV"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENFILE, "ENFILE"),
        (libc::EMFILE, "EMFILE"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EROFS, "EROFS"),
        (libc::EMLINK, "EMLINK"),
        (libc::ERANGE, "ERANGE"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOSYS, "ENOSYS"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ELOOP, "ELOOP"),
        (libc::ENOLINK, "ENOLINK"),
        (libc::EPROTO, "EPROTO"),
        (libc::EOVERFLOW, "EOVERFLOW"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::ENETDOWN, "ENETDOWN"),
        (libc::ETIMEDOUT, "ETIMEDOUT"),
        (libc::EALREADY, "EALREADY"),
        // The kernel's internal ENOTSUPP, which bpf(2) lets through.
        (524, "ENOTSUPP"),
    ];
    NAMES.iter().find(|(v, _)| *v == n).map(|(_, s)| *s)
}

/// An I/O error as `ENAME (message)`: the errno by name, as the man pages
/// and the kernel's sources spell it, then what it means.
pub fn io_error(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            let full = e.to_string();
            let msg = full
                .strip_suffix(&format!(" (os error {n})"))
                .unwrap_or(&full);
            match name(n) {
                Some(name) => format!("{name} ({msg})"),
                None => format!("errno {n} ({msg})"),
            }
        }
        None => e.to_string(),
    }
}

/// An error and every error under it, `: `-separated, I/O errors with
/// their errno ([`io_error`]): aya's `` `bpf_link_create` failed `` keeps
/// the EBUSY it wraps.
pub fn describe(e: &(dyn Error + 'static)) -> String {
    let one = |e: &(dyn Error + 'static)| match e.downcast_ref::<io::Error>() {
        Some(io) => io_error(io),
        None => e.to_string(),
    };
    let mut out = one(e);
    let mut cur = e.source();
    while let Some(c) = cur {
        let part = one(c);
        if !out.contains(&part) {
            out.push_str(": ");
            out.push_str(&part);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_errno() {
        let e = io::Error::from_raw_os_error(libc::EBUSY);
        assert_eq!(io_error(&e), "EBUSY (Device or resource busy)");
        #[derive(Debug)]
        struct Syscall(io::Error);
        impl std::fmt::Display for Syscall {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`bpf_link_create` failed")
            }
        }
        impl Error for Syscall {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Syscall(io::Error::from_raw_os_error(libc::EBUSY));
        assert_eq!(
            describe(&e),
            "`bpf_link_create` failed: EBUSY (Device or resource busy)"
        );
        assert_eq!(
            io_error(&io::Error::from_raw_os_error(4095)),
            "errno 4095 (Unknown error 4095)"
        );
    }
}
