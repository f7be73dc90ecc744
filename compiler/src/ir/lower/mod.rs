//! AST to IR: name resolution, value checking and rule lowering.
//! Expressions are in `lower_expr.rs`, tests in `lower_test.rs`.

mod action;
mod expr;
mod test;

use crate::ast::{self, IpblockEntry, Item, RuleProp, Word};
use crate::cidr::{parse_cidr, Cidr, PrefixSet};
use crate::diag::{code, Diagnostic, Diagnostics};
use crate::ir::{Action, Atom, Cond, IpSet, Origin, Rule, Unit};
use crate::plan::SpannedRule;
use crate::source::{FileId, SourceMap, Span};
use crate::spec::TestCase;
use crate::Options;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What lowering produces, before analysis and planning.
#[derive(Debug, Default)]
pub struct Lowered {
    /// Prefix sets.
    pub ipsets: Vec<IpSet>,
    /// The predicate table.
    pub atoms: Vec<Atom>,
    /// Rules in evaluation order, with their spans.
    pub rules: Vec<SpannedRule>,
    /// Test cases.
    pub tests: Vec<TestCase>,
    /// Merged prefix counts per ipblock name.
    pub ipblock_sizes: Vec<(String, usize, usize)>,
    /// Where each string test was first written (its value), by atom.
    pub atom_spans: HashMap<u32, Span>,
}

/// A lowered pattern (None: it had errors) and the patterns and ipblocks it uses.
pub(crate) type PatternLowered = (Option<Cond>, Vec<String>, Vec<String>);

pub(crate) struct Decl<'a, T> {
    pub decl: &'a T,
    pub file: FileId,
}

pub(crate) struct Lowerer<'a> {
    pub map: &'a mut SourceMap,
    pub diags: &'a mut Diagnostics,
    pub opts: &'a Options,
    pub ipblocks: BTreeMap<String, Decl<'a, ast::IpblockDecl>>,
    pub patterns: BTreeMap<String, Decl<'a, ast::PatternDecl>>,
    /// ipblock name -> ipset index (None: failed).
    pub ipblock_sets: HashMap<String, Option<u32>>,
    /// pattern name -> lowered condition (None: failed), and what it uses.
    pub pattern_conds: HashMap<String, PatternLowered>,
    /// Patterns being lowered (on the walk's stack), for cycles.
    pub in_progress: HashSet<String>,
    pub used_patterns: HashSet<String>,
    pub used_ipblocks: HashSet<String>,
    pub atoms: Vec<Atom>,
    pub atom_ids: HashMap<Atom, u32>,
    pub atom_spans: HashMap<u32, Span>,
    pub ipsets: Vec<IpSet>,
    pub inline_sets: HashMap<PrefixSet, u32>,
    pub regex_count: usize,
    /// Samples of the tests lowered so far.
    pub test_samples: u64,
    pub prefix_total: usize,
    pub list_cache: HashMap<std::path::PathBuf, FileId>,
    /// Where list files may be read.
    pub roots: &'a crate::files::Roots,
}

/// Lowers parsed files into the IR. Reports into `diags`; the result is only
/// meaningful if no error was reported.
pub fn lower(
    files: &[(FileId, ast::File)],
    map: &mut SourceMap,
    opts: &Options,
    roots: &crate::files::Roots,
    diags: &mut Diagnostics,
) -> Lowered {
    let mut lw = Lowerer {
        map,
        diags,
        opts,
        ipblocks: BTreeMap::new(),
        patterns: BTreeMap::new(),
        ipblock_sets: HashMap::new(),
        pattern_conds: HashMap::new(),
        in_progress: HashSet::new(),
        used_patterns: HashSet::new(),
        used_ipblocks: HashSet::new(),
        atoms: Vec::new(),
        atom_ids: HashMap::new(),
        atom_spans: HashMap::new(),
        ipsets: Vec::new(),
        inline_sets: HashMap::new(),
        regex_count: 0,
        test_samples: 0,
        prefix_total: 0,
        list_cache: HashMap::new(),
        roots,
    };
    let mut rules: Vec<Decl<'_, ast::RuleDecl>> = Vec::new();
    let mut tests: Vec<Decl<'_, ast::TestDecl>> = Vec::new();
    let mut rule_names: HashMap<&str, Span> = HashMap::new();
    let mut test_names: HashMap<&str, Span> = HashMap::new();
    for (file, f) in files {
        for item in &f.items {
            match item {
                Item::Include(_) => {}
                Item::Ipblock(d) => {
                    if let Some(prev) = lw.ipblocks.get(&d.name.text) {
                        let prev = prev.decl.name.span;
                        lw.dup("ipblock", &d.name, prev);
                    } else {
                        lw.ipblocks.insert(
                            d.name.text.clone(),
                            Decl {
                                decl: d,
                                file: *file,
                            },
                        );
                    }
                }
                Item::Pattern(d) => {
                    if let Some(prev) = lw.patterns.get(&d.name.text) {
                        let prev = prev.decl.name.span;
                        lw.dup("pattern", &d.name, prev);
                    } else {
                        lw.patterns.insert(
                            d.name.text.clone(),
                            Decl {
                                decl: d,
                                file: *file,
                            },
                        );
                    }
                }
                Item::Rule(d) => {
                    // A duplicate is still lowered, so its own errors show too.
                    if let Some(prev) = rule_names.get(d.name.text.as_str()) {
                        lw.dup("rule", &d.name, *prev);
                    } else {
                        rule_names.insert(&d.name.text, d.name.span);
                    }
                    rules.push(Decl {
                        decl: d,
                        file: *file,
                    });
                }
                Item::Test(d) => {
                    if let Some(prev) = test_names.get(d.name.text.as_str()) {
                        lw.dup("test", &d.name, *prev);
                    } else {
                        test_names.insert(&d.name.text, d.name.span);
                        tests.push(Decl {
                            decl: d,
                            file: *file,
                        });
                    }
                }
            }
        }
    }
    if rules.len() > opts.max_rules {
        lw.diags.push(
            Diagnostic::error(
                code::LIMIT,
                format!(
                    "{} rules, more than the limit of {}",
                    rules.len(),
                    opts.max_rules
                ),
            )
            .primary(
                rules[opts.max_rules].decl.name.span,
                "over the limit from here",
            )
            .hint("raise --max-rules if this is intended"),
        );
    }
    // Every ipblock and pattern is lowered, used or not, so errors in
    // unused objects are still reported.
    let names: Vec<String> = lw.ipblocks.keys().cloned().collect();
    for n in &names {
        lw.ipblock_set(n);
    }
    let names: Vec<String> = lw.patterns.keys().cloned().collect();
    for n in &names {
        lw.pattern_cond(n);
    }
    let mut out_rules = Vec::new();
    for (seq, r) in rules.iter().enumerate() {
        if let Some(rule) = lw.rule(r.decl, r.file, seq as u32) {
            out_rules.push(rule);
        }
    }
    out_rules.sort_by_key(|r| (r.rule.priority, r.rule.seq));
    let rule_set: HashSet<&str> = out_rules.iter().map(|r| r.rule.name.as_str()).collect();
    let sites: HashSet<&str> = out_rules
        .iter()
        .flat_map(|r| r.rule.sites.iter().map(String::as_str))
        .collect();
    let mut out_tests = Vec::new();
    for t in &tests {
        if let Some(tc) = lw.test(t.decl, &rule_set, &sites) {
            out_tests.push(tc);
        }
    }
    lw.unused();
    let mut ipblock_sizes = Vec::new();
    for (name, set) in &lw.ipblock_sets {
        if let Some(i) = set {
            let p = &lw.ipsets[*i as usize].prefixes;
            ipblock_sizes.push((name.clone(), p.v4.len(), p.v6.len()));
        }
    }
    ipblock_sizes.sort();
    Lowered {
        ipsets: lw.ipsets,
        atoms: lw.atoms,
        rules: out_rules,
        tests: out_tests,
        ipblock_sizes,
        atom_spans: lw.atom_spans,
    }
}

impl<'a> Lowerer<'a> {
    fn dup(&mut self, kind: &str, name: &Word, prev: Span) {
        self.diags.push(
            Diagnostic::error(
                code::DUPLICATE_NAME,
                format!("{kind} `{}` is defined twice", name.text),
            )
            .primary(name.span, "defined again here")
            .secondary(prev, "first defined here")
            .hint("names are unique across every file of the ruleset; rename one"),
        );
    }

    pub(crate) fn atom(&mut self, a: Atom) -> Cond {
        if let Some(&id) = self.atom_ids.get(&a) {
            return Cond::Atom(id);
        }
        let id = self.atoms.len() as u32;
        self.atom_ids.insert(a.clone(), id);
        self.atoms.push(a);
        Cond::Atom(id)
    }

    /// Like [`Lowerer::atom`], remembering where the atom was first
    /// written.
    pub(crate) fn atom_at(&mut self, a: Atom, at: Span) -> Cond {
        let c = self.atom(a);
        if let Cond::Atom(id) = c {
            self.atom_spans.entry(id).or_insert(at);
        }
        c
    }

    pub(crate) fn inline_set(&mut self, set: PrefixSet) -> u32 {
        if let Some(&i) = self.inline_sets.get(&set) {
            return i;
        }
        let i = self.ipsets.len() as u32;
        self.inline_sets.insert(set.clone(), i);
        self.ipsets.push(IpSet {
            name: "inline".into(),
            prefixes: set,
        });
        i
    }

    /// Lowers (once) the ipblock called `name`.
    pub(crate) fn ipblock_set(&mut self, name: &str) -> Option<u32> {
        if let Some(r) = self.ipblock_sets.get(name) {
            return *r;
        }
        let d = self.ipblocks.get(name)?;
        let (decl, file) = (d.decl, d.file);
        let mut cidrs = Vec::new();
        let mut ok = true;
        for e in &decl.entries {
            match e {
                IpblockEntry::Comment(_) => {}
                IpblockEntry::Cidr(w) => match parse_cidr(&w.text) {
                    Ok((c, host_bits)) => {
                        if host_bits {
                            self.diags.push(host_bits_warning(w.span, c));
                        }
                        cidrs.push(c);
                    }
                    Err(e) => {
                        ok = false;
                        self.diags.push(
                            Diagnostic::error(code::BAD_CIDR, format!("invalid CIDR `{}`", w.text))
                                .primary(w.span, e.reason)
                                .hint("write an address or network like 192.0.2.0/24 or 2001:db8::/32"),
                        );
                    }
                },
                IpblockEntry::File(w) => ok &= self.read_list(file, w, &mut cidrs),
            }
        }
        let set = PrefixSet::from_cidrs(cidrs);
        self.prefix_total += set.len();
        let result = if ok {
            if set.is_empty() {
                self.diags.push(
                    Diagnostic::warning(code::EMPTY_SET, format!("ipblock `{name}` is empty"))
                        .primary(decl.name.span, "matches no address")
                        .hint("add CIDRs, or a `file \"…\"` with one CIDR a line"),
                );
            }
            let i = self.ipsets.len() as u32;
            self.ipsets.push(IpSet {
                name: name.to_string(),
                prefixes: set,
            });
            Some(i)
        } else {
            None
        };
        if self.prefix_total > self.opts.max_prefixes {
            self.diags.push(
                Diagnostic::error(
                    code::LIMIT,
                    format!(
                        "more than {} prefixes in the ruleset",
                        self.opts.max_prefixes
                    ),
                )
                .primary(decl.name.span, "the limit is crossed in this ipblock")
                .hint("raise the prefix limit if the data plane is sized for it"),
            );
        }
        self.ipblock_sets.insert(name.to_string(), result);
        result
    }

    fn rule(&mut self, d: &ast::RuleDecl, file: FileId, seq: u32) -> Option<SpannedRule> {
        let errors_before = self.diags.error_count();
        let mut seen: HashMap<&'static str, Span> = HashMap::new();
        let mut when: Option<(Cond, Span)> = None;
        let mut action: Option<(Action, Span)> = None;
        let mut priority = 100i32;
        let mut sites = Vec::new();
        let mut enabled = true;
        let mut shadow = false;
        let mut allow_undecided = None;
        let mut comment = String::new();
        for p in &d.props {
            let key = match &p.prop {
                RuleProp::When(_) => "when",
                RuleProp::Priority(_) => "priority",
                RuleProp::Sites(_) => "sites",
                RuleProp::Enabled(_) => "enabled",
                RuleProp::Shadow => "shadow",
                RuleProp::AllowUndecided => "allow_undecided",
                RuleProp::Comment(_) => "comment",
                RuleProp::Action(_) => "action",
            };
            if let Some(prev) = seen.get(key) {
                let (c, msg, hint) = if key == "action" {
                    (code::ACTION_COUNT, format!("rule `{}` has more than one action", d.name.text), "a rule takes exactly one of allow, deny, throttle, log, drop; split it into two rules")
                } else {
                    (
                        code::DUPLICATE_PROP,
                        format!("`{key}` is given twice in rule `{}`", d.name.text),
                        "keep one; combine conditions with `and`/`or`",
                    )
                };
                self.diags.push(
                    Diagnostic::error(c, msg)
                        .primary(p.span, "again here")
                        .secondary(*prev, "first here")
                        .hint(hint),
                );
                continue;
            }
            seen.insert(key, p.span);
            match &p.prop {
                RuleProp::When(e) => {
                    let mut used = (Vec::new(), Vec::new());
                    let c = self.expr(e, &mut used);
                    self.mark_used(&used.0, &used.1);
                    self.check_depth(&c, e.span);
                    when = Some((c, e.span));
                }
                RuleProp::Priority(w) => {
                    let (neg, digits) = match w.text.strip_prefix('-') {
                        Some(rest) => (true, rest),
                        None => (false, w.text.as_str()),
                    };
                    match crate::value::parse_count(digits, 1_000_000) {
                        Ok(n) => priority = if neg { -(n as i32) } else { n as i32 },
                        Err(e) => self.bad(
                            code::BAD_NUMBER,
                            w,
                            "invalid priority",
                            &e,
                            "priority is a whole number; lower runs first (default 100)",
                        ),
                    }
                }
                RuleProp::Sites(ws) => {
                    sites = ws.iter().map(|w| w.text.clone()).collect();
                    sites.sort();
                    sites.dedup();
                }
                RuleProp::Enabled(w) => match w.text.to_ascii_lowercase().as_str() {
                    "true" | "yes" => enabled = true,
                    "false" | "no" => enabled = false,
                    _ => self.bad(
                        code::BAD_VALUE,
                        w,
                        "invalid `enabled`",
                        "expected true or false",
                        "write `enabled false` to keep a rule without enforcing it",
                    ),
                },
                RuleProp::Shadow => shadow = true,
                RuleProp::AllowUndecided => allow_undecided = Some(p.span),
                RuleProp::Comment(w) => comment = w.text.clone(),
                RuleProp::Action(a) => {
                    if let Some(act) = self.action(a, p.span) {
                        action = Some((act, p.span));
                    }
                }
            }
        }
        if !seen.contains_key("when") {
            self.diags.push(
                Diagnostic::error(
                    code::NO_WHEN,
                    format!("rule `{}` has no `when` condition", d.name.text),
                )
                .primary(d.name.span, "no condition")
                .hint("add `when <condition>`; use `when true` to match everything"),
            );
        }
        if !seen.contains_key("action") {
            self.diags.push(
                Diagnostic::error(
                    code::ACTION_COUNT,
                    format!("rule `{}` has no action", d.name.text),
                )
                .primary(d.name.span, "no action")
                .hint(
                    "add one of: allow, deny 403 \"reason\", throttle N requests per 1m, log, drop",
                ),
            );
        }
        let (cond, when_span) = when?;
        let (action, action_span) = action?;
        if let (Some(span), false) = (allow_undecided, action == Action::Allow) {
            self.diags.push(
                Diagnostic::error(
                    code::BAD_VALUE,
                    format!("`allow_undecided` in rule `{}`, which is not an allow", d.name.text),
                )
                .primary(span, "only for allow rules")
                .secondary(action_span, format!("this rule is a {}", action.kind()))
                .hint("`allow_undecided` accepts an exemption the compiler cannot prove; remove it here"),
            );
        }
        if let Action::Throttle(t) = &action {
            if t.unit != Unit::Requests {
                self.check_l4_only(&cond, when_span, action_span, &d.name.text);
            }
        }
        if self.diags.error_count() > errors_before {
            return None;
        }
        let (line, col) = (d.name.span.line, d.name.span.col);
        let file_name = self
            .map
            .get(file)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        Some(SpannedRule {
            rule: Rule {
                name: d.name.text.clone(),
                priority,
                seq,
                sites,
                enabled,
                shadow,
                comment,
                cond,
                action,
                origin: Origin {
                    file: file_name,
                    line,
                    col,
                },
            },
            name: d.name.span,
            when: when_span,
            allow_undecided: allow_undecided.is_some(),
        })
    }

    fn check_l4_only(&mut self, cond: &Cond, when: Span, action: Span, name: &str) {
        let mut l7 = Vec::new();
        cond.visit_atoms(&mut |a| {
            if !self.atoms[a as usize].is_l4() {
                l7.push(a);
            }
        });
        if let Some(&a) = l7.first() {
            let field = match &self.atoms[a as usize] {
                Atom::Str { field, .. } | Atom::Present(field) => field.display(),
                _ => String::new(),
            };
            self.diags.push(
                Diagnostic::error(code::BAD_THROTTLE, format!("packet and connection limits in rule `{name}` can only use ip, dst_ip, port and proto"))
                    .primary(when, format!("this condition uses `{field}`"))
                    .secondary(action, "counted per packet or connection here")
                    .hint("the packet plane cannot see HTTP fields; count `requests` instead, or drop the HTTP part"),
            );
        }
    }

    pub(crate) fn bad(&mut self, c: &'static str, w: &Word, msg: &str, label: &str, hint: &str) {
        self.diags.push(
            Diagnostic::error(c, format!("{msg} `{}`", w.text))
                .primary(w.span, label.to_string())
                .hint(hint.to_string()),
        );
    }

    /// Marks patterns and ipblocks used, and everything those patterns
    /// use in turn. A worklist, not recursion: a chain of references may be
    /// as long as the input.
    pub(crate) fn mark_used(&mut self, patterns: &[String], ipblocks: &[String]) {
        self.used_ipblocks.extend(ipblocks.iter().cloned());
        let mut todo: Vec<&str> = patterns.iter().map(String::as_str).collect();
        while let Some(p) = todo.pop() {
            if !self.used_patterns.insert(p.to_string()) {
                continue;
            }
            if let Some((_, ps, bs)) = self.pattern_conds.get(p) {
                self.used_ipblocks.extend(bs.iter().cloned());
                todo.extend(ps.iter().map(String::as_str));
            }
        }
    }

    fn unused(&mut self) {
        let mut found = Vec::new();
        for (n, d) in &self.ipblocks {
            if !self.used_ipblocks.contains(n) {
                found.push(("ipblock", n.clone(), d.decl.name.span));
            }
        }
        for (n, d) in &self.patterns {
            if !self.used_patterns.contains(n) {
                found.push(("pattern", n.clone(), d.decl.name.span));
            }
        }
        for (kind, n, span) in found {
            self.diags.push(
                Diagnostic::warning(
                    code::UNUSED,
                    format!("{kind} `{n}` is not used by any rule"),
                )
                .primary(span, "defined here")
                .hint(format!("reference it as {kind}@{n}, or remove it")),
            );
        }
    }
}

pub(crate) fn host_bits_warning(span: Span, c: Cidr) -> Diagnostic {
    let net = match c {
        Cidr::V4(n, l) => crate::cidr::fmt_v4(n, l),
        Cidr::V6(n, l) => crate::cidr::fmt_v6(n, l),
    };
    Diagnostic::warning(code::HOST_BITS, "CIDR has host bits set")
        .primary(span, format!("this is the network {net}"))
        .hint(format!("write {net} to make that explicit"))
}

/// The standard reason phrase for the statuses rules commonly use.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        418 => "I'm a teapot",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Request Denied",
    }
}
