//! What the kernel and the bpffs say about an interface, and the metadata
//! that describes it: read, checked against the pins, or rebuilt.

use super::paths::{generation_of, IfName, Paths};
use super::sys::{describe, link_ifindex};
use super::{ifindex, Attached, Mode};
use crate::error::{err, LoaderError};
use aya::maps::{Array, Map, MapData};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::ProgramInfo;
use rctl_common::{maps, Clock, Term, CONFIG_TERMS};
use rctl_dataplane::xdp::{ClockMode, Tables};
use rctl_os::fs::read_private;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The pinned link of an interface, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkState {
    /// The link's id.
    pub link_id: u32,
    /// The id of the program it runs.
    pub prog_id: u32,
    /// The index of the interface it is attached to (0: that interface is
    /// gone, and the kernel detached the link); `null` if not known.
    pub ifindex: Option<u32>,
}

/// Where the metadata `status` shows came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetaSource {
    /// `IF.json`, checked against the pins.
    Recorded,
    /// `IF.json.gen-N`: an apply was interrupted after its switch.
    Staged,
    /// Rebuilt from the pinned generation and its artifact (the metadata
    /// was missing, unreadable or did not match).
    Rebuilt,
    /// Not known: no metadata and no artifact matches the program.
    Missing,
}

/// An interface's state in the kernel and the bpffs.
pub(crate) struct Observed {
    /// The pinned link's descriptor (held: dropping it after unpinning
    /// detaches the program) and what the kernel says about it.
    pub link: Option<(FdLink, LinkState)>,
    /// Whether something is pinned at `IF/link` (a link or not).
    pub link_pinned: bool,
    /// Why the pinned link could not be read.
    pub link_error: Option<String>,
    /// Pinned generations: number, and the id of its program if pinned.
    pub gens: BTreeMap<u64, Option<u32>>,
    /// The interface's index now (`None`: no interface of that name).
    pub ifindex: Option<u32>,
    /// The generation whose program the link runs.
    pub live: Option<u64>,
}

impl Observed {
    /// Reads the state of `name`.
    pub(crate) fn read(paths: &Paths, name: &IfName) -> Observed {
        let pin = paths.link(name);
        let link_pinned = std::fs::symlink_metadata(&pin).is_ok();
        let (link, link_error) = if link_pinned {
            match read_link(&pin) {
                Ok(l) => (Some(l), None),
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, None)
        };
        let mut gens = BTreeMap::new();
        if let Ok(d) = std::fs::read_dir(paths.pins(name)) {
            for e in d.flatten() {
                let Some(g) = e.file_name().to_str().and_then(generation_of) else {
                    continue;
                };
                let prog = ProgramInfo::from_pin(e.path().join("prog"))
                    .ok()
                    .map(|i| i.id());
                gens.insert(g, prog);
            }
        }
        let live = link.as_ref().and_then(|(_, l)| {
            gens.iter()
                .find(|(_, p)| **p == Some(l.prog_id))
                .map(|(g, _)| *g)
        });
        Observed {
            link,
            link_pinned,
            link_error,
            gens,
            ifindex: ifindex(name),
            live,
        }
    }

    /// Whether the pinned link runs on the interface of that name now (its
    /// program can be replaced in place).
    pub(crate) fn link_attached(&self) -> bool {
        match (&self.link, self.ifindex) {
            (Some((_, l)), Some(now)) => l.ifindex.is_none_or(|i| i == now),
            _ => false,
        }
    }

    /// Whether the kernel runs rctl's program on the interface: its pinned
    /// link is attached to the interface of that name.
    pub(crate) fn enforcing(&self) -> bool {
        self.link_attached()
    }

    /// What is wrong with an enforcing link: a program none of the pinned
    /// generations holds.
    pub(crate) fn unknown_program(&self) -> Option<String> {
        match (&self.link, self.live) {
            (Some((_, l)), None) if self.enforcing() => Some(format!(
                "the link runs program {}, which none of the pinned generations holds (their                  pins were removed): its counters and buckets cannot be read, and the next                  apply replaces it without carrying them",
                l.prog_id
            )),
            _ => None,
        }
    }

    /// Why rctl is not enforcing on `name`, if it is not.
    pub(crate) fn not_enforcing(&self, name: &IfName) -> Option<String> {
        if self.enforcing() {
            return None;
        }
        let again = format!("`rctl apply --iface {name}` attaches afresh");
        Some(match (&self.link, self.ifindex) {
            (None, _) if self.link_pinned => format!(
                "what is pinned as its link is not a BPF link ({}); {again}",
                self.link_error.as_deref().unwrap_or("unreadable")
            ),
            (None, _) => format!("no link is pinned, so no program is attached; {again}"),
            (Some((_, l)), None) => format!(
                "there is no interface {name} now: the interface the link ran on was \
                 deleted (link {}, interface index {}); {again} once it is back",
                l.link_id,
                l.ifindex.unwrap_or(0)
            ),
            (Some((_, l)), Some(now)) => format!(
                "the link (id {}) is no longer attached to {name} (index {now}): {}; {again}",
                l.link_id,
                match l.ifindex {
                    Some(0) => "the interface it ran on was deleted".to_string(),
                    Some(i) => format!("it runs on interface index {i}"),
                    None => "unknown".to_string(),
                }
            ),
        })
    }

    /// The generation to carry state from and describe: the live one; when
    /// no link runs, the one the recorded metadata names, else the newest
    /// pinned; none when the link runs a program no generation holds.
    pub(crate) fn source(&self, paths: &Paths, name: &IfName) -> Option<u64> {
        if self.unknown_program().is_some() {
            return None;
        }
        self.live.or_else(|| {
            let recorded = read_private(&paths.meta(name))
                .ok()
                .and_then(|b| serde_json::from_slice::<Attached>(&b).ok())
                .map(|a| a.generation)
                .filter(|g| self.gens.contains_key(g));
            recorded.or_else(|| self.gens.keys().next_back().copied())
        })
    }

    /// The number for a new generation: after every pinned one.
    pub(crate) fn next_generation(&self) -> u64 {
        match self.gens.keys().next_back() {
            None => 1,
            Some(&m) => m
                .checked_add(1)
                .unwrap_or_else(|| (1..).find(|g| !self.gens.contains_key(g)).unwrap_or(1)),
        }
    }
}

/// Whether rctl has any state for `name` (pins, metadata or artifacts).
pub(crate) fn has_state(paths: &Paths, name: &IfName) -> bool {
    paths.pins(name).is_dir()
        || std::fs::symlink_metadata(paths.meta(name)).is_ok()
        || paths.artifacts(name).is_dir()
        || !staged_metas(paths, name).is_empty()
}

/// The staged metadata files of `name`: (generation, path).
pub(crate) fn staged_metas(paths: &Paths, name: &IfName) -> Vec<(u64, PathBuf)> {
    let prefix = format!("{name}.json.");
    std::fs::read_dir(&paths.run)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    let g = generation_of(n.strip_prefix(&prefix)?)?;
                    Some((g, e.path()))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn read_link(pin: &Path) -> Result<(FdLink, LinkState), String> {
    let pinned = PinnedLink::from_pin(pin).map_err(|e| describe(&e))?;
    let fd = FdLink::from(pinned);
    let info = fd.info().map_err(|e| describe(&e))?;
    let state = LinkState {
        link_id: info.id(),
        prog_id: info.program_id(),
        ifindex: link_ifindex(info.id()),
    };
    Ok((fd, state))
}

/// Opens a pinned map.
pub(crate) fn open_map(path: &Path) -> Result<MapData, LoaderError> {
    MapData::from_pin(path)
        .map_err(|e| err(format!("opening {}: {}", path.display(), describe(&e))))
}

fn array<V: aya::Pod>(path: &Path) -> Result<Array<MapData, V>, LoaderError> {
    Array::try_from(Map::Array(open_map(path)?)).map_err(|e| err(describe(&e)))
}

/// The terms the pinned generation `dir` runs, if pinned.
fn pinned_terms(dir: &Path) -> Option<Vec<Term>> {
    let config = array::<u32>(&dir.join(maps::CONFIG)).ok()?;
    let n = config.get(&0, 0).ok()? & CONFIG_TERMS;
    let terms = array::<Term>(&dir.join(maps::TERMS)).ok()?;
    (0..n).map(|i| terms.get(&i, 0).ok()).collect()
}

/// The term count the pinned generation `dir` runs, if pinned.
fn pinned_term_count(dir: &Path) -> Option<usize> {
    let config = array::<u32>(&dir.join(maps::CONFIG)).ok()?;
    Some((config.get(&0, 0).ok()? & CONFIG_TERMS) as usize)
}

/// The clock the pinned generation `dir` reads, if pinned.
fn pinned_clock(dir: &Path) -> Option<ClockMode> {
    let c: Clock = array::<Clock>(&dir.join(maps::CLOCK))
        .ok()?
        .get(&0, 0)
        .ok()?;
    Some(if c.tick_ns != 0 {
        ClockMode::Tick
    } else {
        ClockMode::Exact
    })
}

/// The artifact files that may hold generation `g`'s artifact: the one
/// staged for it (present until it is installed), then the installed one.
fn artifact_files(paths: &Paths, name: &IfName, g: u64) -> [PathBuf; 2] {
    [paths.staged_artifact(name, g), paths.artifact(name)]
}

/// The content hash in an artifact file's header.
pub(crate) fn header_hash(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut head = [0u8; 56];
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))?
        .read_exact(&mut head)
        .ok()?;
    rctl_compiler::artifact::content_hash(&head).map(|h| rctl_compiler::artifact::hex(&h))
}

/// Metadata for a generation, and where it came from.
pub(crate) struct Resolved {
    /// The metadata, if known.
    pub meta: Option<Attached>,
    /// Where it came from.
    pub source: MetaSource,
    /// What was wrong with what was recorded.
    pub warnings: Vec<String>,
}

/// Why `a` does not describe generation `g` of `name`, if it does not.
fn mismatch(paths: &Paths, name: &IfName, g: u64, a: &Attached) -> Option<String> {
    let hex = a.artifact_sha256.len() == 64
        && a.artifact_sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if a.iface != name.as_str() {
        return Some(format!("it describes interface {:?}", a.iface));
    }
    if a.generation != g {
        return Some(format!(
            "it describes generation {}, and generation {g} is pinned",
            a.generation
        ));
    }
    if !hex {
        return Some(format!(
            "its artifact hash {:?} is not a SHA-256",
            a.artifact_sha256
        ));
    }
    if let Some(l) = a.limiters.iter().find(|l| !a.rules.contains(l)) {
        return Some(format!("its limiter {l:?} is none of its rules"));
    }
    let dir = paths.generation(name, g);
    if let Some(n) = pinned_term_count(&dir).filter(|&n| n != a.terms) {
        return Some(format!("it has {} terms, and the program {n}", a.terms));
    }
    let installed = artifact_files(paths, name, g)
        .iter()
        .find_map(|p| header_hash(p));
    if let Some(h) = installed.filter(|h| *h != a.artifact_sha256) {
        return Some(format!(
            "its artifact hash is not that of the artifact in force ({})",
            &h[..16]
        ));
    }
    None
}

/// The metadata of generation `g` of `name`: `IF.json` if it matches the
/// pins, else the staged `IF.json.gen-N`, else rebuilt from the pinned
/// generation and its artifact.
pub(crate) fn resolve(paths: &Paths, name: &IfName, g: u64, link: Option<&LinkState>) -> Resolved {
    let mut why = Vec::new();
    let mut hint = serde_json::Value::Null;
    let candidates = [
        (paths.meta(name), MetaSource::Recorded),
        (paths.staged_meta(name, g), MetaSource::Staged),
    ];
    for (path, source) in &candidates {
        let bytes = match read_private(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if *source == MetaSource::Recorded {
                    why.push(format!("{} is missing", path.display()));
                }
                continue;
            }
            Err(e) => {
                why.push(format!("{}: {}", path.display(), super::sys::io_error(&e)));
                continue;
            }
        };
        if hint.is_null() {
            hint = serde_json::from_slice(&bytes).unwrap_or_default();
        }
        match serde_json::from_slice::<Attached>(&bytes) {
            Err(e) => why.push(format!("{} is not valid metadata ({e})", path.display())),
            Ok(a) => match mismatch(paths, name, g, &a) {
                None => {
                    // The staged file, read while an apply is between its
                    // switch and its rename, is expected: no warning.
                    let warnings = if *source == MetaSource::Staged {
                        Vec::new()
                    } else {
                        why
                    };
                    return Resolved {
                        meta: Some(a),
                        source: *source,
                        warnings,
                    };
                }
                Some(m) => why.push(format!("{} does not match the pins: {m}", path.display())),
            },
        }
    }
    let summary = why.join("; ");
    match rebuild(paths, name, g, link, &hint) {
        Ok((a, from)) => Resolved {
            meta: Some(a),
            source: MetaSource::Rebuilt,
            warnings: vec![format!(
                "{summary}: rebuilt the metadata of generation {g} from its pins and {} (the \
                 next apply records it afresh)",
                from.display()
            )],
        },
        Err(e) => Resolved {
            meta: None,
            source: MetaSource::Missing,
            warnings: vec![format!(
                "{summary}, and it cannot be rebuilt ({e}): rule names are not known (the next \
                 apply records them afresh)"
            )],
        },
    }
}

/// Generation `g`'s metadata from what is pinned: the artifact staged for
/// it or installed, with the site (the one the damaged metadata names,
/// none, or any the rules name) whose terms are exactly the ones the
/// program runs.
fn rebuild(
    paths: &Paths,
    name: &IfName,
    g: u64,
    link: Option<&LinkState>,
    hint: &serde_json::Value,
) -> Result<(Attached, PathBuf), String> {
    let dir = paths.generation(name, g);
    let running = pinned_terms(&dir);
    let hinted_site = hint
        .get("site")
        .and_then(|s| s.as_str())
        .map(str::to_string);
    let mode = hint
        .get("mode")
        .and_then(|m| serde_json::from_value::<Mode>(m.clone()).ok())
        .filter(|m| *m != Mode::Auto);
    let clock = pinned_clock(&dir)
        .or_else(|| {
            hint.get("clock")
                .and_then(|c| serde_json::from_value(c.clone()).ok())
        })
        .unwrap_or_default();
    let applied_unix = ProgramInfo::from_pin(dir.join("prog"))
        .ok()
        .and_then(|i| i.loaded_at())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let mut tried = Vec::new();
    for path in artifact_files(paths, name, g) {
        let Ok(bytes) = read_private(&path) else {
            continue;
        };
        let rs = match rctl_compiler::artifact::decode(&bytes) {
            Ok(rs) => rs,
            Err(e) => {
                tried.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let mut sites: Vec<Option<String>> = vec![hinted_site.clone(), None];
        let mut named: Vec<String> = rs.rules.iter().flat_map(|r| r.sites.clone()).collect();
        named.sort_unstable();
        named.dedup();
        sites.extend(named.into_iter().map(Some));
        sites.dedup();
        for site in sites {
            let Ok(tables) = Tables::new(&rs, site.as_deref()) else {
                continue;
            };
            if running.as_ref().is_some_and(|t| *t != tables.terms) {
                continue;
            }
            let hash = rctl_compiler::artifact::content_hash(&bytes)
                .unwrap_or_else(|| rctl_compiler::artifact::sha256(&bytes));
            let a = Attached {
                iface: name.to_string(),
                mode,
                clock,
                generation: g,
                artifact_sha256: rctl_compiler::artifact::hex(&hash),
                site,
                rules: rs.rules.iter().map(|r| r.name.clone()).collect(),
                prefixes: (tables.v4.len(), tables.v6.len()),
                terms: tables.terms.len(),
                limiters: tables
                    .limiter_rules
                    .iter()
                    .map(|&r| rs.rules[r].name.clone())
                    .collect(),
                applied_unix,
                ifindex: link.and_then(|l| l.ifindex).unwrap_or(0),
            };
            return Ok((a, path));
        }
        tried.push(format!(
            "{}: its terms are not the program's",
            path.display()
        ));
    }
    Err(if tried.is_empty() {
        "no artifact is installed for it".into()
    } else {
        tried.join("; ")
    })
}
