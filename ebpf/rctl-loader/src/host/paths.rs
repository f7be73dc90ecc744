//! Interface names, checked before they become paths, and where each
//! piece of state lives.

use crate::error::{ErrorKind, LoaderError};
use std::fmt;
use std::path::PathBuf;

/// An interface name that is safe to use as a path component: what the
/// kernel accepts as a device name (`dev_valid_name`: 1 to 15 bytes, no
/// `/`, no `:`, no whitespace, not `.` or `..`), and no control
/// characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfName(String);

/// The longest interface name, in bytes (`IFNAMSIZ` less the NUL).
pub const IFNAME_MAX: usize = 15;

impl IfName {
    /// Checks `name`; the error says what is wrong with it.
    pub fn new(name: &str) -> Result<IfName, LoaderError> {
        let why = if name.is_empty() {
            Some("it is empty".to_string())
        } else if name.len() > IFNAME_MAX {
            Some(format!(
                "it is {} bytes long, and names have at most {IFNAME_MAX}",
                name.len()
            ))
        } else if name == "." || name == ".." {
            Some("`.` and `..` are not interface names".to_string())
        } else {
            name.chars()
                .find(|&c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
                .map(|c| format!("it contains {c:?}"))
        };
        match why {
            None => Ok(IfName(name.to_string())),
            Some(why) => Err(LoaderError::new(
                ErrorKind::Interface,
                format!(
                    "invalid interface name {name:?}: {why} (an interface name has 1 to \
                 {IFNAME_MAX} bytes, no `/`, `:`, whitespace or control characters, and is \
                 not `.` or `..`; see `ip link`)"
                ),
            )),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where rctl keeps its state (see the module docs for the layout).
#[derive(Debug, Clone)]
pub struct Paths {
    /// The bpffs mount (default `/sys/fs/bpf`); rctl's pins are under
    /// `rctl/` in it.
    pub bpffs: PathBuf,
    /// Runtime metadata and locks (default `/run/rctl`).
    pub run: PathBuf,
    /// The installed artifacts, one directory per interface (default
    /// `/var/lib/rctl`).
    pub state: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            bpffs: "/sys/fs/bpf".into(),
            run: "/run/rctl".into(),
            state: "/var/lib/rctl".into(),
        }
    }
}

impl Paths {
    /// `BPFFS/rctl`: every interface's pins.
    pub(crate) fn pin_root(&self) -> PathBuf {
        self.bpffs.join("rctl")
    }
    /// `BPFFS/rctl/IF`.
    pub(crate) fn pins(&self, i: &IfName) -> PathBuf {
        self.pin_root().join(i.as_str())
    }
    /// `BPFFS/rctl/IF/link`.
    pub(crate) fn link(&self, i: &IfName) -> PathBuf {
        self.pins(i).join("link")
    }
    /// `BPFFS/rctl/IF/gen-N`.
    pub(crate) fn generation(&self, i: &IfName, g: u64) -> PathBuf {
        self.pins(i).join(format!("gen-{g}"))
    }
    /// `RUN/IF.lock`.
    pub(crate) fn lock(&self, i: &IfName) -> PathBuf {
        self.run.join(format!("{i}.lock"))
    }
    /// `RUN/IF.json`.
    pub(crate) fn meta(&self, i: &IfName) -> PathBuf {
        self.run.join(format!("{i}.json"))
    }
    /// `RUN/IF.json.gen-N`: generation N's metadata before it is live.
    pub(crate) fn staged_meta(&self, i: &IfName, g: u64) -> PathBuf {
        self.run.join(format!("{i}.json.gen-{g}"))
    }
    /// `STATE/IF`.
    pub(crate) fn artifacts(&self, i: &IfName) -> PathBuf {
        self.state.join(i.as_str())
    }
    /// `STATE/IF/active.rctlc`: the artifact in force on `i`.
    pub fn artifact(&self, i: &IfName) -> PathBuf {
        self.artifacts(i).join("active.rctlc")
    }
    /// `STATE/IF/gen-N.rctlc`: generation N's artifact before it is live.
    pub(crate) fn staged_artifact(&self, i: &IfName, g: u64) -> PathBuf {
        self.artifacts(i).join(format!("gen-{g}.rctlc"))
    }
}

/// `gen-N` → N.
pub(crate) fn generation_of(name: &str) -> Option<u64> {
    let n = name.strip_prefix("gen-")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_kernel() {
        for ok in [
            "eth0",
            "eth0.100",
            "veth-a_b",
            "x",
            "123456789012345",
            "wlp2s0@",
        ] {
            assert_eq!(IfName::new(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../../../../tmp/x",
            "a:0",
            "a b",
            "a\tb",
            "a\nb",
            "a\u{1b}[31m",
            "a\0b",
            "1234567890123456",
            "ééééééééé",
        ] {
            let e = IfName::new(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid interface name"), "{bad:?}: {e}");
            assert!(!e.contains('\u{1b}'), "escaped: {e}");
        }
    }

    #[test]
    fn generation_names() {
        assert_eq!(generation_of("gen-1"), Some(1));
        assert_eq!(generation_of("gen-18446744073709551615"), Some(u64::MAX));
        for bad in [
            "gen-",
            "gen-x",
            "gen-+1",
            "gen-18446744073709551616",
            "gen1",
        ] {
            assert_eq!(generation_of(bad), None, "{bad}");
        }
    }
}
