//! What the kernel says of an XDP link, read from /proc.

pub(crate) use rctl_os::errno::{describe, io_error};

/// A `key:\tvalue` field of an fdinfo file.
fn field(info: &str, key: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// The index of the interface the XDP link `link_id` is attached to, from
/// the fdinfo of a descriptor this process holds on it (the kernel's
/// `bpf_link_info` has it, aya's does not): 0 once the interface is gone
/// (the kernel then detaches the link). `None` if no descriptor of this
/// process refers to that link.
pub(crate) fn link_ifindex(link_id: u32) -> Option<u32> {
    for e in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        // `anon_inode:bpf-link` (older kernels: `bpf_link`).
        let is_link = std::fs::read_link(e.path()).is_ok_and(|t| {
            t.to_str()
                .and_then(|t| t.strip_prefix("anon_inode:bpf"))
                .is_some_and(|k| k == "-link" || k == "_link")
        });
        if !is_link {
            continue;
        }
        let name = e.file_name();
        let Ok(info) =
            std::fs::read_to_string(std::path::Path::new("/proc/self/fdinfo").join(&name))
        else {
            continue;
        };
        if field(&info, "link_id") == Some(link_id) {
            return field(&info, "ifindex");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_fields() {
        let info = "pos:\t0\nflags:\t02000002\nlink_type:\txdp\nlink_id:\t17\nprog_tag:\tab\nprog_id:\t40\nifindex:\t3\n";
        assert_eq!(field(info, "link_id"), Some(17));
        assert_eq!(field(info, "ifindex"), Some(3));
        assert_eq!(field(info, "prog_id"), Some(40));
        assert_eq!(field(info, "nothing"), None);
    }
}
