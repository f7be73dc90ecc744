//! Ipblock list files: one CIDR a line, `#` comments, large lists fast.

use crate::ast::Word;
use crate::cidr::{parse_cidr, Cidr};
use crate::diag::{code, excerpt, Diagnostic};
use crate::lower::Lowerer;
use crate::source::FileId;
use std::path::Path;

impl Lowerer<'_> {
    /// Reads a list file: one CIDR a line, `#` comments, blank lines ignored.
    pub(crate) fn read_list(&mut self, from: FileId, w: &Word, out: &mut Vec<Cidr>) -> bool {
        let base = self
            .map
            .get(from)
            .and_then(|f| f.path.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let path = base.join(&w.text);
        let id = if let Some(&id) = self.list_cache.get(&path) {
            id
        } else {
            match self.roots.read(&path, true, self.opts.max_file_bytes) {
                Ok(text) => {
                    let id = self.map.add(path.clone(), text);
                    self.list_cache.insert(path.clone(), id);
                    id
                }
                Err(e) => {
                    let d = e.into_diagnostic(self.map, Some(w.span), &path);
                    self.diags.push(d);
                    return false;
                }
            }
        };
        let Some(src) = self.map.get(id) else {
            return false;
        };
        let mut ok = true;
        let mut host_bits: Vec<(usize, usize)> = Vec::new();
        let mut bad = 0usize;
        let mut errors = Vec::new();
        let mut off = 0usize;
        for line in src.text.split_inclusive('\n') {
            let content = line.split('#').next().unwrap_or("");
            let entry = content.trim();
            if !entry.is_empty() {
                let lead = content.len() - content.trim_start().len();
                let (s, e) = (off + lead, off + lead + entry.len());
                // A list line may be `CIDR` or `CIDR, comment` (CSV exports).
                let token = entry.split([',', ' ', '\t', ';']).next().unwrap_or(entry);
                match parse_cidr(token) {
                    Ok((c, hb)) => {
                        if hb {
                            host_bits.push((s, s + token.len()));
                        }
                        out.push(c);
                    }
                    Err(err) => {
                        ok = false;
                        bad += 1;
                        if errors.len() < 20 {
                            errors.push(
                                Diagnostic::error(code::BAD_CIDR, format!("invalid CIDR `{}` in list file", excerpt(token, 40)))
                                    .primary(src.span(id, s, e), err.reason)
                                    .secondary(w.span, "list file loaded here")
                                    .hint("list files hold one address or CIDR a line; `#` starts a comment"),
                            );
                        }
                    }
                }
            }
            off += line.len();
        }
        if bad > errors.len() {
            errors.push(
                Diagnostic::error(
                    code::BAD_CIDR,
                    format!(
                        "{} more invalid lines in `{}`",
                        bad - errors.len(),
                        path.display()
                    ),
                )
                .primary(w.span, "list file loaded here"),
            );
        }
        if let Some(&(s, e)) = host_bits.first() {
            let first = src.span(id, s, e);
            let n = host_bits.len();
            errors.push(
                Diagnostic::warning(
                    code::HOST_BITS,
                    format!(
                        "{n} entr{} in `{}` have host bits set",
                        if n == 1 { "y" } else { "ies" },
                        path.display()
                    ),
                )
                .primary(first, "the first one")
                .secondary(w.span, "list file loaded here")
                .hint("the network address is used; fix the list to silence this"),
            );
        }
        for d in errors {
            self.diags.push(d);
        }
        ok
    }
}
