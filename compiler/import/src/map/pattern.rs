//! A pattern as each target translates it (conftool's `translate.py`):
//!
//! | field | Varnish (`VCLTranslator`) | HAProxy (`HAProxyACLTranslator`) |
//! |---|---|---|
//! | `method` | `req.method == "M"` | `method M` |
//! | `url_path`, `query_parameter`, `query_parameter_value` | one regex on `req.url` (path and query): `URL_PATH` + `.*` (when both) + `[?&]PARAM` + `=VALUE` | `path_reg URL_PATH`; `query -m reg -i PARAM=VALUE`, or `PARAM` after `^` or `&` |
//! | `header`, `header_value`, `header_is_set` | `req.http.H ~ "V"` (an absent header is `""` to the regex), `req.http.H`, `!req.http.H` | `req.fhdr(H) -m reg -i V`, `req.hdr(H) -m found`, absent |
//! | `request_body` | dropped | refused |

use super::{quote, Ctx, Flavor};
use crate::model::{Pattern, Val};
use crate::HeaderSchema;
use rctl_compiler::diag::{code, Diagnostic};
use rctl_compiler::source::Span;

/// A pattern's rctl condition, and what differs from the target's meaning
/// (for the pattern's comment).
pub(super) struct Translated {
    pub cond: String,
    pub notes: Vec<String>,
}

/// One regex piece and the field it came from.
struct Piece<'a> {
    text: String,
    from: Option<&'a Val<String>>,
}

impl Ctx<'_> {
    /// Translates a regex made of `pieces`; a PCRE-only construct is an
    /// error at its position in the field it came from.
    fn regex(&mut self, pieces: &[Piece<'_>], ci: bool, fallback: Span) -> Option<String> {
        let whole: String = pieces.iter().map(|p| p.text.as_str()).collect();
        match crate::pcre::translate(&whole, ci) {
            Ok(r) => {
                match rctl_compiler::validate::build_regex(&r, ci, 1 << 20) {
                    Ok(_) => Some(r),
                    Err(e) => {
                        self.diags.push(
                        Diagnostic::error(
                            code::BAD_REGEX,
                            format!("regex `{whole}` cannot be compiled: {e}"),
                        )
                        .primary(fallback, "this regex")
                        .hint("requestctl's regexes are PCRE; rctl runs them as regex-automata does"),
                    );
                        None
                    }
                }
            }
            Err(u) => {
                let mut at = u.at;
                let mut span = fallback;
                for p in pieces {
                    if at < p.text.len() {
                        if let Some(v) = p.from {
                            span = super::within(self.sources, v, at, at + 1);
                        }
                        break;
                    }
                    at -= p.text.len();
                }
                self.diags.push(
                    Diagnostic::error(
                        code::BAD_REGEX,
                        format!("{} has no rctl equivalent", u.what),
                    )
                    .primary(span, "PCRE only")
                    .hint("rewrite the regex without it; rctl's regexes are regex-automata's (like Rust's regex crate)"),
                );
                None
            }
        }
    }

    /// Whether a translated regex matches the empty string (Varnish gives
    /// an absent header to a regex as `""`).
    fn matches_empty(r: &str) -> bool {
        rctl_compiler::validate::build_regex(r, false, 1 << 20).is_ok_and(|re| re.is_match(""))
    }

    /// The pattern's condition for `flavor`, or `None` after an error.
    pub(super) fn pattern(
        &mut self,
        p: &Pattern,
        whole: Span,
        slug: &str,
        flavor: Flavor,
    ) -> Option<Translated> {
        let errors = self.diags.error_count();
        let mut parts = Vec::new();
        let mut notes = Vec::new();
        if !p.method.v.is_empty() {
            if !p
                .method
                .v
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"')
            {
                self.diags.push(
                    Diagnostic::error(code::IMPORT_SHAPE, "a method is a token")
                        .primary(p.method.span, "not a method"),
                );
            }
            parts.push(format!("method == {}", quote(&p.method.v)));
        }
        let (up, qp, qv) = (&p.url_path, &p.query_parameter, &p.query_parameter_value);
        match flavor {
            Flavor::Varnish => {
                if !(up.v.is_empty() && qp.v.is_empty() && qv.v.is_empty()) {
                    let mut pieces = vec![Piece {
                        text: up.v.clone(),
                        from: Some(up),
                    }];
                    if !up.v.is_empty() && !qp.v.is_empty() {
                        pieces.push(Piece {
                            text: ".*".into(),
                            from: None,
                        });
                    }
                    if !qp.v.is_empty() {
                        pieces.push(Piece {
                            text: "[?&]".into(),
                            from: None,
                        });
                        pieces.push(Piece {
                            text: qp.v.clone(),
                            from: Some(qp),
                        });
                        if !qv.v.is_empty() {
                            pieces.push(Piece {
                                text: "=".into(),
                                from: None,
                            });
                            pieces.push(Piece {
                                text: qv.v.clone(),
                                from: Some(qv),
                            });
                        }
                    }
                    if let Some(r) = self.regex(&pieces, false, up.span) {
                        parts.push(format!("url ~ {}", quote(&r)));
                    }
                }
            }
            Flavor::Haproxy => {
                if !up.v.is_empty() {
                    let pieces = [Piece {
                        text: up.v.clone(),
                        from: Some(up),
                    }];
                    if let Some(r) = self.regex(&pieces, false, up.span) {
                        parts.push(format!("path ~ {}", quote(&r)));
                        let note = "HAProxy's path_reg saw the raw path; rctl's path is percent-normalised, so a path with escapes (%41 for A, lower-case hex) can match here and not there";
                        self.diags.push(
                            Diagnostic::warning(code::IMPORT_CHANGED, note)
                                .primary(up.span, "matched against the normalised path"),
                        );
                        notes.push(note.to_string());
                    }
                }
                if !qp.v.is_empty() {
                    if qv.v.is_empty() {
                        let note = format!("requestctl writes `{{ query -m reg ^{q} }} {{ query -m reg &{q} }}` for a parameter without a value, which HAProxy 2.6 refuses (haproxy -c); rctl imports what it means: the query has a parameter starting with {q}", q = qp.v);
                        self.diags.push(
                            Diagnostic::warning(code::IMPORT_CHANGED, note.clone())
                                .primary(qp.span, "parameter present"),
                        );
                        notes.push(note);
                        let pieces = [
                            Piece {
                                text: "(?:^|&)".into(),
                                from: None,
                            },
                            Piece {
                                text: qp.v.clone(),
                                from: Some(qp),
                            },
                        ];
                        if let Some(r) = self.regex(&pieces, false, qp.span) {
                            parts.push(format!("query ~ {}", quote(&r)));
                        }
                    } else {
                        let pieces = [
                            Piece {
                                text: qp.v.clone(),
                                from: Some(qp),
                            },
                            Piece {
                                text: "=".into(),
                                from: None,
                            },
                            Piece {
                                text: qv.v.clone(),
                                from: Some(qv),
                            },
                        ];
                        if let Some(r) = self.regex(&pieces, true, qp.span) {
                            parts.push(format!("query ~* {}", quote(&r)));
                        }
                    }
                }
            }
        }
        if !p.header.v.is_empty() {
            let h = &p.header.v;
            if !h
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b':' && b != b'"')
            {
                self.diags.push(
                    Diagnostic::error(code::IMPORT_SHAPE, format!("`{h}` is not a header name"))
                        .primary(p.header.span, "not a header name")
                        .hint("header names are visible ASCII without `:`"),
                );
            }
            let hq = quote(h);
            let new = self.header_schema == HeaderSchema::New;
            let is_set = if new {
                p.header_is_set.v
            } else {
                !p.header_value.v.is_empty()
            };
            if new && !p.header_is_set.given && !p.header_value.v.is_empty() {
                let note = format!("header_is_set is missing, which the newer schema reads as false: header {h} must be absent, whatever header_value says");
                self.diags.push(
                    Diagnostic::warning(code::IMPORT_CHANGED, note.clone())
                        .primary(p.header_value.span, "ignored, as requestctl ignores it")
                        .hint("add `header_is_set: true` to match the value, or run with --header-schema old"),
                );
                notes.push(note);
            }
            if !is_set {
                if flavor == Flavor::Haproxy {
                    let note = format!("requestctl writes `hdr_len({h}, 0)` for an absent header, which HAProxy 2.6 refuses (haproxy -c); rctl imports what it means: header {h} absent");
                    self.diags.push(
                        Diagnostic::warning(code::IMPORT_CHANGED, note.clone())
                            .primary(p.header.span, "header absent"),
                    );
                    notes.push(note);
                }
                parts.push(format!("header({hq}) absent"));
            } else if p.header_value.v.is_empty() {
                parts.push(format!("header({hq}) present"));
            } else {
                let pieces = [Piece {
                    text: p.header_value.v.clone(),
                    from: Some(&p.header_value),
                }];
                let ci = flavor == Flavor::Haproxy;
                if let Some(r) = self.regex(&pieces, ci, p.header_value.span) {
                    let op = if ci { "~*" } else { "~" };
                    let test = format!("header({hq}) {op} {}", quote(&r));
                    if flavor == Flavor::Varnish && Self::matches_empty(&r) {
                        // Varnish matches an absent header as "".
                        parts.push(format!("({test} or header({hq}) absent)"));
                    } else {
                        parts.push(test);
                    }
                }
            }
        }
        if !p.request_body.v.is_empty() {
            let (what, verdict) = match flavor {
                Flavor::Varnish => (
                    "request_body has no rctl equivalent; requestctl's VCL drops it",
                    "matched without the body test, as requestctl's VCL does",
                ),
                Flavor::Haproxy => (
                    "request_body has no rctl equivalent; requestctl's HAProxy translation refuses it",
                    "matched without the body test",
                ),
            };
            if self.opts.lossy {
                self.diags.push(
                    Diagnostic::warning(code::IMPORT_CHANGED, format!("{what}: {verdict}"))
                        .primary(p.request_body.span, "left out"),
                );
                notes.push(format!("{what}: {verdict}"));
            } else {
                self.diags.push(
                    Diagnostic::error(code::IMPORT_UNSUPPORTED, what)
                        .primary(p.request_body.span, "not imported")
                        .hint("remove it, or run with --lossy to import the pattern without it (a wider match)"),
                );
            }
        }
        if parts.is_empty() && self.diags.error_count() == errors {
            self.diags.push(
                Diagnostic::error(
                    code::IMPORT_SHAPE,
                    format!(
                        "pattern {slug} sets no field: it matches nothing requestctl can translate"
                    ),
                )
                .primary(whole, "in this file")
                .hint("set method, url_path, header or query_parameter"),
            );
        }
        (self.diags.error_count() == errors).then(|| Translated {
            cond: parts.join(" and "),
            notes,
        })
    }
}
