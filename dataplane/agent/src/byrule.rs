//! State kept per rule name across generations (counters, log buckets),
//! found from a rule's index in a generation without a lock.
//!
//! A generation's rules are resolved to their states once, the first time
//! a request of that generation is seen; the few most recent resolutions
//! are kept in an atomically swapped list, so that requests of the old and
//! the new generation interleaving during a swap both find theirs. A rule
//! keeps its state across generations as long as its name is in each; the
//! states of names the newest generation lacks are let go.

use crate::judge::Generation;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many generations' resolutions are kept.
const RECENT: usize = 4;

/// One generation's states, by rule index.
pub(crate) type States<T> = Arc<[Arc<T>]>;

/// Per-rule states of type `T`, by name.
#[derive(Debug)]
pub(crate) struct ByRule<T> {
    names: Mutex<HashMap<String, Arc<T>>>,
    recent: ArcSwap<Vec<(u64, States<T>)>>,
    newest: Mutex<u64>,
}

impl<T: Default> Default for ByRule<T> {
    fn default() -> Self {
        ByRule {
            names: Mutex::new(HashMap::new()),
            recent: ArcSwap::from_pointee(Vec::new()),
            newest: Mutex::new(0),
        }
    }
}

impl<T: Default> ByRule<T> {
    /// The states of `g`'s rules, by rule index.
    pub(crate) fn of(&self, g: &Generation) -> States<T> {
        if let Some((_, s)) = self.recent.load().iter().find(|(n, _)| *n == g.number) {
            return Arc::clone(s);
        }
        self.resolve(g)
    }

    #[cold]
    fn resolve(&self, g: &Generation) -> States<T> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut newest = self.newest.lock().unwrap_or_else(|p| p.into_inner());
        let rules = &g.engine.ruleset().rules;
        let states: States<T> = rules
            .iter()
            .map(|r| Arc::clone(names.entry(r.name.clone()).or_default()))
            .collect();
        if g.number > *newest {
            *newest = g.number;
            let keep: std::collections::HashSet<&str> =
                rules.iter().map(|r| r.name.as_str()).collect();
            names.retain(|n, _| keep.contains(n.as_str()));
        }
        let mut recent: Vec<(u64, States<T>)> = self.recent.load().as_ref().clone();
        recent.retain(|(n, _)| *n != g.number);
        recent.push((g.number, Arc::clone(&states)));
        recent.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
        recent.truncate(RECENT);
        self.recent.store(Arc::new(recent));
        states
    }

    /// Every state by name, sorted by name.
    pub(crate) fn all(&self) -> Vec<(String, Arc<T>)> {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(String, Arc<T>)> = names
            .iter()
            .map(|(n, s)| (n.clone(), Arc::clone(s)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rctl_dataplane::{Engine, EngineConfig};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A generation of `src` numbered `number`.
    pub(crate) fn generation(src: &str, number: u64) -> Generation {
        let c = rctl_compiler::compile_str("t.rctl", src, &Default::default());
        let rs = c.ruleset.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
        Generation {
            engine: Engine::new(rs, &EngineConfig::default()).unwrap(),
            sha256: format!("{number:064x}"),
            number,
            installed_unix: 0,
        }
    }

    #[test]
    fn states_follow_names_across_generations() {
        let by: ByRule<AtomicU64> = ByRule::default();
        let g1 = generation(
            r#"rule a { when path == "/a" log }
rule b { when path == "/b" log }"#,
            1,
        );
        let g2 = generation(
            r#"rule c { when path == "/c" log }
rule a { when path == "/a" deny 403 "x" }"#,
            2,
        );
        by.of(&g1)[0].fetch_add(5, Ordering::Relaxed);
        by.of(&g1)[1].fetch_add(1, Ordering::Relaxed);
        let s2 = by.of(&g2);
        assert_eq!(s2[1].load(Ordering::Relaxed), 5, "a keeps its count");
        assert_eq!(s2[0].load(Ordering::Relaxed), 0);
        // g1's requests still in flight find g1's states, without a rebuild.
        assert!(Arc::ptr_eq(&by.of(&g1)[0], &s2[1]));
        let names: Vec<String> = by.all().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["a", "c"],
            "b is gone with the generation that had it"
        );
    }
}
