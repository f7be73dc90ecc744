//! User and group names to ids (through the C library, so NSS sources
//! such as LDAP work as they do for `id`), and the effective user.

use std::ffi::{CStr, CString};
use std::fmt;

/// A user or group name that does not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// `user` or `group`.
    pub what: &'static str,
    /// The name as given.
    pub name: String,
    /// Why, when the lookup itself failed (not just "no such name").
    pub why: Option<String>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            None => write!(
                f,
                "no {} named {:?} on this host (see `getent {}`)",
                self.what,
                self.name,
                if self.what == "user" {
                    "passwd"
                } else {
                    "group"
                }
            ),
            Some(why) => write!(f, "looking up {} {:?}: {why}", self.what, self.name),
        }
    }
}

impl std::error::Error for UnknownName {}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective group id of this process.
pub fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// The id of group `name` (a number is taken as the id itself).
pub fn group_id(name: &str) -> Result<u32, UnknownName> {
    lookup("group", name)
}

/// The id of user `name` (a number is taken as the id itself).
pub fn user_id(name: &str) -> Result<u32, UnknownName> {
    lookup("user", name)
}

/// The name of user `uid`, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    passwd_entry(uid).map(|(name, _)| name)
}

/// Every group user `uid` is in, primary first, from the user database
/// (`getgrouplist`, as `id -G` shows them); `None` for an unknown user.
pub fn groups_of(uid: u32) -> Option<Vec<u32>> {
    let (name, gid) = passwd_entry(uid)?;
    let c = CString::new(name).ok()?;
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `groups` holds `n` entries; getgrouplist writes at most
        // that many and sets `n` to how many there are.
        let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        let n = usize::try_from(n).unwrap_or(0);
        if rc >= 0 {
            groups.truncate(n);
            return Some(groups);
        }
        if n <= groups.len() || n > 1 << 16 {
            return Some(vec![gid]);
        }
        groups.resize(n, 0);
    }
}

/// User `uid`'s name and primary group.
fn passwd_entry(uid: u32) -> Option<(String, u32)> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: passwd is plain old data; zeroed is a valid value.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the duration of the call and
        // `buf.len()` is the size of `buf`; the result borrows `buf`.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || out.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points at a NUL-terminated string in
        // `buf`, which is alive here.
        let name = unsafe { CStr::from_ptr(pw.pw_name) };
        return Some((name.to_string_lossy().into_owned(), pw.pw_gid));
    }
}

fn lookup(what: &'static str, name: &str) -> Result<u32, UnknownName> {
    let unknown = |why: Option<String>| UnknownName {
        what,
        name: name.to_string(),
        why,
    };
    if let Ok(id) = name.parse::<u32>() {
        return Ok(id);
    }
    let Ok(c) = CString::new(name) else {
        return Err(unknown(Some("the name holds a NUL byte".into())));
    };
    let mut buf = vec![0u8; 4096];
    loop {
        let (rc, found) = if what == "group" {
            // SAFETY: group is plain old data; zeroed is a valid value.
            let mut gr: libc::group = unsafe { std::mem::zeroed() };
            let mut out: *mut libc::group = std::ptr::null_mut();
            // SAFETY: every pointer is valid for the duration of the call
            // and `buf.len()` is the size of `buf`.
            let rc = unsafe {
                libc::getgrnam_r(
                    c.as_ptr(),
                    &mut gr,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut out,
                )
            };
            (rc, (!out.is_null()).then_some(gr.gr_gid))
        } else {
            // SAFETY: passwd is plain old data; zeroed is a valid value.
            let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
            let mut out: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: as above.
            let rc = unsafe {
                libc::getpwnam_r(
                    c.as_ptr(),
                    &mut pw,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut out,
                )
            };
            (rc, (!out.is_null()).then_some(pw.pw_uid))
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return match (rc, found) {
            (0, Some(id)) => Ok(id),
            // "Not found" is 0 with no result, or one of these (glibc
            // returns the NSS module's errno).
            (0 | libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, None) => {
                Err(unknown(None))
            }
            (rc, _) => Err(unknown(Some(
                std::io::Error::from_raw_os_error(rc).to_string(),
            ))),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_resolve_and_unknown_names_say_so() {
        assert_eq!(user_id("root"), Ok(0));
        assert_eq!(group_id("root"), Ok(0));
        assert_eq!(group_id("4242"), Ok(4242));
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(groups_of(0).unwrap().first(), Some(&0));
        assert_eq!(groups_of(4_000_000_000), None);
        let e = group_id("no-such-group-rctl").unwrap_err();
        assert_eq!(e.why, None);
        assert!(e.to_string().contains("getent group"), "{e}");
        assert!(user_id("a\0b").is_err());
    }
}
