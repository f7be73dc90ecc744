//! `rctl import requestctl`: requestctl's objects (Wikimedia's conftool
//! extension `reqconfig`) read from their YAML tree or a `requestctl dump`,
//! checked as requestctl checks them, and written as `.rctl` rulesets that
//! decide as requestctl's generated VCL and HAProxy configuration do.
//!
//! - [`yaml`] reads YAML into a spanned tree;
//! - [`model`] reads requestctl's objects with its schema and defaults;
//! - [`expr`] parses action expressions with requestctl's grammar;
//! - [`pcre`] rewrites requestctl's PCRE regexes in rctl's syntax;
//! - [`map`] writes the rulesets: one for the Varnish actions of each
//!   cluster (`varnish/<cluster>/`), one for the HAProxy actions of each
//!   cluster (`haproxy/<cluster>/`), each with every ipblock and the
//!   patterns, as their target translates them.
//!
//! Everything that differs from requestctl's translation is a diagnostic
//! with its YAML file and position: an error where rctl has no
//! equivalent (or, with [`Options::lossy`], a warning and a comment on the
//! rule), a warning (W0106) where the meaning is kept up to a stated
//! difference.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod expr;
pub mod map;
pub mod model;
pub mod pcre;
mod read;
pub mod yaml;

#[cfg(test)]
mod limits_tests;

use model::{Entity, Object};
use rctl_compiler::diag::{code, Diagnostic, Diagnostics};
use rctl_compiler::source::SourceMap;
use std::path::{Path, PathBuf};

/// How to read what the tree leaves open.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Keep what has no rctl equivalent as a warning and a comment (the
    /// rule then does less, or nothing: it is logged), instead of an error.
    pub lossy: bool,
    /// Which schema a pattern without `header_is_set` follows; `None`:
    /// decided from the tree (see [`HeaderSchema`]).
    pub header_schema: Option<HeaderSchema>,
    /// How much may be read.
    pub limits: Limits,
}

/// How much an import may read: every limit passed is an error naming the
/// file (and, in YAML, the position), found before reading on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest file, a tree's or a dump, in bytes (held while reading).
    pub max_file_bytes: usize,
    /// Most bytes a tree's files hold in all.
    pub max_total_bytes: usize,
    /// Most directory entries a tree walk looks at.
    pub max_entries: usize,
    /// Most YAML nodes a tree's files hold in all (each file also within
    /// [`yaml::Limits::max_nodes`]).
    pub max_total_nodes: usize,
    /// What one YAML file may make the reader build.
    pub yaml: yaml::Limits,
}

impl Default for Limits {
    /// 64 MiB a file, 256 MiB in all, 100,000 entries, four million YAML
    /// nodes in all, and [`yaml::Limits::default`]: far above requestctl's
    /// objects, which etcd keeps under 1.5 MiB each by default.
    fn default() -> Self {
        Limits {
            max_file_bytes: 64 << 20,
            max_total_bytes: 256 << 20,
            max_entries: 100_000,
            max_total_nodes: 4_000_000,
            yaml: yaml::Limits::default(),
        }
    }
}

/// requestctl's two readings of a pattern's `header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderSchema {
    /// Before `header_is_set`: an empty `header_value` means the header is
    /// absent, any other value is a regex on it.
    Old,
    /// With `header_is_set`: false means absent (whatever the value), true
    /// means present, or matching `header_value` if there is one. A tree is
    /// read this way when any pattern has `header_is_set`, or any action
    /// has `priority`, or it has HAProxy actions (all of them came with
    /// the newer schema).
    New,
}

/// One file of an imported ruleset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFile {
    /// File name in the ruleset's directory.
    pub name: String,
    /// Formatted `.rctl` text.
    pub text: String,
}

/// One imported ruleset: what one Varnish or HAProxy cluster enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutRuleset {
    /// Directory relative to the output directory (`varnish/cache-text`).
    pub dir: String,
    /// Its files.
    pub files: Vec<OutFile>,
}

/// The outcome of an import.
#[derive(Debug, Default)]
pub struct Imported {
    /// Every YAML file read, for rendering diagnostics.
    pub sources: SourceMap,
    /// Errors and warnings.
    pub diagnostics: Diagnostics,
    /// The rulesets (empty when there were errors).
    pub rulesets: Vec<OutRuleset>,
    /// What was skipped, one sentence each (non-YAML files and the like).
    pub notes: Vec<String>,
}

/// Imports a requestctl tree (a directory holding `request-ipblocks/`,
/// `request-patterns/`, `request-actions/`, `request-haproxy-actions/`) or
/// a dump file (`requestctl dump`: a YAML stream of `{metadata, data}`).
pub fn import_path(path: &Path, opts: &Options) -> Imported {
    let mut imp = Imported::default();
    let mut objects = Vec::new();
    if path.is_dir() {
        read_tree(path, opts, &mut imp, &mut objects);
    } else {
        read_dump(path, opts, &mut imp, &mut objects);
    }
    finish(imp, &objects, opts)
}

/// A name rctl can carry: requestctl's `[A-Za-z0-9_-]`, and `.` but not
/// first (names become directory and file names: `..` or `.hidden` would
/// leave or hide in the output directory).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn read_tree(root: &Path, opts: &Options, imp: &mut Imported, objects: &mut Vec<(Entity, Object)>) {
    let mut reader = read::Reader::tree(root, &opts.limits);
    let mut found = false;
    for (entity, dir, _) in Entity::ALL {
        let base = root.join(dir);
        if !matches!(reader.examine(&base, false, imp), Some(read::Entry::Dir)) {
            continue;
        }
        found = true;
        for tag_dir in reader.entries(&base, imp) {
            match reader.examine(&tag_dir, false, imp) {
                Some(read::Entry::Dir) => {}
                Some(_) => {
                    imp.notes.push(format!(
                        "skipped {}: requestctl reads only {dir}/<tag>/<name>.yaml",
                        tag_dir.display()
                    ));
                    continue;
                }
                None => continue,
            }
            let tag = tag_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for file in reader.entries(&tag_dir, imp) {
                let skip = |imp: &mut Imported| {
                    imp.notes.push(format!(
                        "skipped {}: not a .yaml file (requestctl reads only <name>.yaml)",
                        file.display()
                    ));
                };
                if file.extension().is_none_or(|e| e != "yaml") {
                    skip(imp);
                    continue;
                }
                match reader.examine(&file, true, imp) {
                    Some(read::Entry::File) => {}
                    Some(read::Entry::Special(kind)) => {
                        imp.diagnostics.push(read::not_regular(&file, kind));
                        continue;
                    }
                    Some(read::Entry::Dir | read::Entry::Dangling) => {
                        skip(imp);
                        continue;
                    }
                    None => continue,
                }
                let name = file
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let Some(id) = reader.read(&file, imp) else {
                    continue;
                };
                read_object(entity, (&tag, &name), id, &mut reader, opts, imp, objects);
            }
        }
    }
    if !found {
        imp.diagnostics.push(
            Diagnostic::error(
                code::IMPORT_SHAPE,
                format!(
                    "{} has none of request-ipblocks/, request-patterns/, request-actions/, request-haproxy-actions/",
                    root.display()
                ),
            )
            .hint("name the root of a requestctl tree (what `requestctl sync -g` reads), or a `requestctl dump` file"),
        );
    }
}

/// Reads the object in one file of a tree.
fn read_object(
    entity: Entity,
    (tag, name): (&str, &str),
    id: rctl_compiler::source::FileId,
    reader: &mut read::Reader,
    opts: &Options,
    imp: &mut Imported,
    objects: &mut Vec<(Entity, Object)>,
) {
    let Some(src) = imp.sources.get(id) else {
        return;
    };
    let whole = src.span(id, 0, src.text.len().min(1));
    if !valid_name(tag) || !valid_name(name) {
        imp.diagnostics.push(
            Diagnostic::error(
                code::IMPORT_SHAPE,
                format!("`{tag}/{name}` is not a requestctl object name"),
            )
            .primary(whole, "in this file")
            .hint("scopes, clusters and names are letters, digits, `_` and `-`"),
        );
        return;
    }
    let docs = match yaml::documents(src, id, &opts.limits.yaml) {
        Ok(d) => d,
        Err(d) => {
            imp.diagnostics.push(*d);
            return;
        }
    };
    if let Some(d) = reader.count_nodes(yaml::count(&docs), &src.path) {
        imp.diagnostics.push(d);
        return;
    }
    if docs.len() > 1 {
        imp.diagnostics.push(
            Diagnostic::error(code::IMPORT_SHAPE, "one requestctl object a file")
                .primary(docs[1].span, "a second document")
                .hint("requestctl reads the first document only; split the file"),
        );
        return;
    }
    if let Some(o) = model::read(entity, tag, name, docs.first(), whole, &mut imp.diagnostics) {
        objects.push((entity, o));
    }
}

/// Imports a dump (`requestctl dump`: a YAML stream of `{metadata, data}`)
/// held in memory; `name` is the file name its diagnostics show. What
/// `import_path` does for a dump file, without the file system (for
/// embedding and for the fuzz target).
pub fn import_dump_text(name: &str, text: String, opts: &Options) -> Imported {
    let mut imp = Imported::default();
    let mut objects = Vec::new();
    if text.len() > opts.limits.max_file_bytes {
        imp.diagnostics.push(
            Diagnostic::error(
                code::TOO_LARGE,
                format!(
                    "`{name}` is over the size limit of {} bytes for one file",
                    opts.limits.max_file_bytes
                ),
            )
            .hint("requestctl's objects are far smaller: check that this is the right file"),
        );
        return imp;
    }
    let id = imp.sources.add(PathBuf::from(name), text);
    read_dump_source(id, opts, &mut imp, &mut objects);
    finish(imp, &objects, opts)
}

/// Maps the objects read into rulesets, unless reading them failed.
fn finish(mut imp: Imported, objects: &[(Entity, Object)], opts: &Options) -> Imported {
    // One object per type and path, as in etcd (a dump may repeat one).
    let mut seen = std::collections::HashMap::new();
    for (entity, o) in objects {
        if let Some(first) = seen.insert((*entity, o.slug()), o.span) {
            imp.diagnostics.push(
                Diagnostic::error(
                    code::DUPLICATE_NAME,
                    format!("`{}` is defined twice", o.slug()),
                )
                .primary(o.span, "defined again here")
                .secondary(first, "first defined here")
                .hint("requestctl keeps one object per path; remove one"),
            );
        }
    }
    if imp.diagnostics.has_errors() {
        return imp;
    }
    let rulesets = map::map(objects, opts, &imp.sources, &mut imp.diagnostics);
    if !imp.diagnostics.has_errors() {
        imp.rulesets = rulesets;
    }
    imp
}

fn read_dump(path: &Path, opts: &Options, imp: &mut Imported, objects: &mut Vec<(Entity, Object)>) {
    if let Some(id) = read::Reader::dump(&opts.limits).read(path, imp) {
        read_dump_source(id, opts, imp, objects);
    }
}

fn read_dump_source(
    id: rctl_compiler::source::FileId,
    opts: &Options,
    imp: &mut Imported,
    objects: &mut Vec<(Entity, Object)>,
) {
    let Some(src) = imp.sources.get(id) else {
        return;
    };
    let docs = match yaml::documents(src, id, &opts.limits.yaml) {
        Ok(d) => d,
        Err(d) => {
            imp.diagnostics.push(*d);
            return;
        }
    };
    for doc in &docs {
        fn get<'n>(n: &'n yaml::Node, k: &str) -> Option<&'n yaml::Node> {
            match &n.kind {
                yaml::Kind::Map(es) => es
                    .iter()
                    .find(|(key, _)| matches!(&key.kind, yaml::Kind::Scalar { text, .. } if text == k))
                    .map(|(_, v)| v),
                _ => None,
            }
        }
        let text = |n: Option<&yaml::Node>| match n.map(|n| &n.kind) {
            Some(yaml::Kind::Scalar { text, .. }) => Some(text.clone()),
            _ => None,
        };
        let meta = get(doc, "metadata");
        let ty = text(meta.and_then(|m| get(m, "type")));
        let slug = text(meta.and_then(|m| get(m, "path")));
        let (Some(ty), Some(slug)) = (ty, slug) else {
            imp.diagnostics.push(
                Diagnostic::error(
                    code::IMPORT_SHAPE,
                    "a dump document needs metadata.type and metadata.path",
                )
                .primary(doc.span, "this document")
                .hint("`requestctl dump` writes {metadata: {type, path}, data: {…}} documents"),
            );
            continue;
        };
        let Some((entity, _, _)) = Entity::ALL.iter().find(|e| e.2 == ty) else {
            imp.notes.push(format!(
                "skipped a `{ty}` object ({slug}) at line {}: not an ipblock, pattern or action",
                doc.span.line
            ));
            continue;
        };
        let (tag, name) = slug.split_once('/').unwrap_or(("", ""));
        if !valid_name(tag) || !valid_name(name) {
            imp.diagnostics.push(
                Diagnostic::error(
                    code::IMPORT_SHAPE,
                    format!("`{slug}` is not a requestctl object name"),
                )
                .primary(doc.span, "this document")
                .hint("paths are scope/name (ipblocks, patterns) or cluster/name (actions)"),
            );
            continue;
        }
        let data = get(doc, "data");
        if let Some(o) = model::read(
            *entity,
            tag,
            name,
            data,
            data.map_or(doc.span, |d| d.span),
            &mut imp.diagnostics,
        ) {
            objects.push((*entity, o));
        }
    }
}

impl Imported {
    /// Writes every ruleset below `out` (directories created as needed;
    /// each file written to a temporary name and renamed). Returns the
    /// ruleset directories written.
    pub fn write(&self, out: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut dirs = Vec::new();
        for rs in &self.rulesets {
            let dir = out.join(&rs.dir);
            std::fs::create_dir_all(&dir)?;
            for f in &rs.files {
                let target = dir.join(&f.name);
                if let Ok(m) = std::fs::symlink_metadata(&target) {
                    if !m.file_type().is_file() {
                        return Err(std::io::Error::other(format!(
                            "{} exists and is not a regular file",
                            target.display()
                        )));
                    }
                }
                let tmp = dir.join(format!(".{}.tmp", f.name));
                std::fs::write(&tmp, &f.text)?;
                std::fs::rename(&tmp, &target)?;
            }
            dirs.push(dir);
        }
        Ok(dirs)
    }
}
