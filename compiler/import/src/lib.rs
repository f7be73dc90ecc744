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
pub mod yaml;

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
        read_tree(path, &mut imp, &mut objects);
    } else {
        read_dump(path, &mut imp, &mut objects);
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

fn read_file(path: &Path, imp: &mut Imported) -> Option<rctl_compiler::source::FileId> {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Some(imp.sources.add(path.to_path_buf(), text)),
            Err(e) => {
                imp.diagnostics.push(
                    Diagnostic::error(
                        code::NOT_UTF8,
                        format!(
                            "{} is not UTF-8 (byte {})",
                            path.display(),
                            e.utf8_error().valid_up_to()
                        ),
                    )
                    .hint("requestctl's files are UTF-8 YAML"),
                );
                None
            }
        },
        Err(e) => {
            imp.diagnostics.push(
                Diagnostic::error(code::IO, format!("cannot read {}: {e}", path.display()))
                    .hint("check the path and its permissions"),
            );
            None
        }
    }
}

fn sorted_entries(dir: &Path, imp: &mut Imported) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            v.sort();
            v
        }
        Err(e) => {
            imp.diagnostics.push(
                Diagnostic::error(code::IO, format!("cannot read {}: {e}", dir.display()))
                    .hint("check the path and its permissions"),
            );
            Vec::new()
        }
    }
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

fn read_tree(root: &Path, imp: &mut Imported, objects: &mut Vec<(Entity, Object)>) {
    let mut found = false;
    for (entity, dir, _) in Entity::ALL {
        let base = root.join(dir);
        if !base.is_dir() {
            continue;
        }
        found = true;
        for tag_dir in sorted_entries(&base, imp) {
            if hidden(&tag_dir) {
                continue;
            }
            if !tag_dir.is_dir() {
                imp.notes.push(format!(
                    "skipped {}: requestctl reads only {dir}/<tag>/<name>.yaml",
                    tag_dir.display()
                ));
                continue;
            }
            let tag = tag_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for file in sorted_entries(&tag_dir, imp) {
                if hidden(&file) {
                    continue;
                }
                let is_yaml = file.extension().is_some_and(|e| e == "yaml");
                if !is_yaml || !file.is_file() {
                    imp.notes.push(format!(
                        "skipped {}: not a .yaml file (requestctl reads only <name>.yaml)",
                        file.display()
                    ));
                    continue;
                }
                let name = file
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let Some(id) = read_file(&file, imp) else {
                    continue;
                };
                let src = imp.sources.get(id).expect("just added");
                let whole = src.span(id, 0, src.text.len().min(1));
                if !valid_name(&tag) || !valid_name(&name) {
                    imp.diagnostics.push(
                        Diagnostic::error(
                            code::IMPORT_SHAPE,
                            format!("`{tag}/{name}` is not a requestctl object name"),
                        )
                        .primary(whole, "in this file")
                        .hint("scopes, clusters and names are letters, digits, `_` and `-`"),
                    );
                    continue;
                }
                let docs = match yaml::documents(src, id) {
                    Ok(d) => d,
                    Err(d) => {
                        imp.diagnostics.push(*d);
                        continue;
                    }
                };
                if docs.len() > 1 {
                    imp.diagnostics.push(
                        Diagnostic::error(code::IMPORT_SHAPE, "one requestctl object a file")
                            .primary(docs[1].span, "a second document")
                            .hint("requestctl reads the first document only; split the file"),
                    );
                    continue;
                }
                if let Some(o) = model::read(
                    entity,
                    &tag,
                    &name,
                    docs.first(),
                    whole,
                    &mut imp.diagnostics,
                ) {
                    objects.push((entity, o));
                }
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

/// Imports a dump (`requestctl dump`: a YAML stream of `{metadata, data}`)
/// held in memory; `name` is the file name its diagnostics show. What
/// `import_path` does for a dump file, without the file system (for
/// embedding and for the fuzz target).
pub fn import_dump_text(name: &str, text: String, opts: &Options) -> Imported {
    let mut imp = Imported::default();
    let mut objects = Vec::new();
    let id = imp.sources.add(PathBuf::from(name), text);
    read_dump_source(id, &mut imp, &mut objects);
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

fn read_dump(path: &Path, imp: &mut Imported, objects: &mut Vec<(Entity, Object)>) {
    if let Some(id) = read_file(path, imp) {
        read_dump_source(id, imp, objects);
    }
}

fn read_dump_source(
    id: rctl_compiler::source::FileId,
    imp: &mut Imported,
    objects: &mut Vec<(Entity, Object)>,
) {
    let src = imp.sources.get(id).expect("just added");
    let docs = match yaml::documents(src, id) {
        Ok(d) => d,
        Err(d) => {
            imp.diagnostics.push(*d);
            return;
        }
    };
    for doc in &docs {
        let get = |n: &yaml::Node, k: &str| -> Option<yaml::Node> {
            match &n.kind {
                yaml::Kind::Map(es) => es
                    .iter()
                    .find(|(key, _)| matches!(&key.kind, yaml::Kind::Scalar { text, .. } if text == k))
                    .map(|(_, v)| v.clone()),
                _ => None,
            }
        };
        let text = |n: Option<&yaml::Node>| match n.map(|n| &n.kind) {
            Some(yaml::Kind::Scalar { text, .. }) => Some(text.clone()),
            _ => None,
        };
        let meta = get(doc, "metadata");
        let ty = text(meta.as_ref().and_then(|m| get(m, "type")).as_ref());
        let slug = text(meta.as_ref().and_then(|m| get(m, "path")).as_ref());
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
            data.as_ref(),
            data.as_ref().map_or(doc.span, |d| d.span),
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
