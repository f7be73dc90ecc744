//! What the importer refuses to read, and how fast it reads what it
//! accepts: real files, symlinks, FIFOs, sockets and devices in a
//! temporary directory, imported with the default options. Every import
//! runs under a deadline, so a hang fails the test instead of hanging it.

use crate::{import_dump_text, import_path, Imported, Options};
use rctl_compiler::diag::code;
use rctl_testkit::proc::TempDir;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A fresh directory for one test, removed when it is dropped.
fn tempdir(name: &str) -> TempDir {
    TempDir::new(&format!("import-{name}"))
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn symlink(target: &Path, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Runs `f` on another thread and fails if it takes longer than `secs`.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(_) => panic!("did not finish within {secs} s"),
    }
}

fn import_tree(root: &Path, secs: u64) -> Imported {
    let root = root.to_path_buf();
    within(secs, move || import_path(&root, &Options::default()))
}

/// Every diagnostic rendered, and every note.
fn report(imp: &Imported) -> String {
    let mut s: String = imp
        .diagnostics
        .iter()
        .map(|d| d.render(&imp.sources))
        .collect();
    for n in &imp.notes {
        s.push_str(n);
        s.push('\n');
    }
    s
}

fn codes(imp: &Imported) -> Vec<&'static str> {
    imp.diagnostics.iter().map(|d| d.code).collect()
}

const IPBLOCK: &str = "cidrs:\n- 192.0.2.0/24\ncomment: fine\n";

/// A small tree that imports: one ipblock.
fn tree(name: &str) -> TempDir {
    let root = tempdir(name);
    write(&root.join("request-ipblocks/abuse/fine.yaml"), IPBLOCK);
    root
}

/// Nine levels of nine aliases, each line indented by `indent`: under 600
/// bytes that expand to 9^9 nodes.
fn alias_bomb(indent: &str) -> String {
    let mut s = format!("{indent}a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        s.push_str(&format!("{indent}{name}: &{name} [{refs}]\n"));
    }
    s
}

#[test]
fn an_alias_bomb_is_refused_at_its_position_quickly() {
    let bomb = format!(
        "data:\n{}metadata:\n  path: abuse/bomb\n  type: ipblock\n",
        alias_bomb("  ")
    );
    assert!(bomb.len() < 700, "{}", bomb.len());
    let t = Instant::now();
    let imp = within(10, move || {
        import_dump_text("bomb.yaml", bomb, &Options::default())
    });
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    let r = report(&imp);
    assert!(r.contains("YAML aliases expand past the limit"), "{r}");
    // file:line:col of the alias that passes the budget.
    assert!(r.contains("--> bomb.yaml:"), "{r}");
    assert!(imp.rulesets.is_empty());
}

#[test]
fn an_alias_bomb_in_a_tree_is_refused_too() {
    let root = tree("bomb-tree");
    write(
        &root.join("request-ipblocks/abuse/bomb.yaml"),
        &alias_bomb(""),
    );
    let imp = import_tree(&root, 10);
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    assert!(report(&imp).contains("bomb.yaml:"), "{}", report(&imp));
}

#[test]
fn a_few_aliases_are_read_as_before() {
    let dump = "data:\n  cidrs: &c\n  - 192.0.2.0/24\n  comment: a\nmetadata: {path: abuse/a, type: ipblock}\n---\n\
                data:\n  cidrs: *c\n  comment: b\nmetadata: {path: abuse/b, type: ipblock}\n";
    let imp = import_dump_text("dump.yaml", dump.into(), &Options::default());
    assert!(!imp.diagnostics.has_errors(), "{}", report(&imp));
    let objects = imp.rulesets.iter().find(|r| r.dir == "objects").unwrap();
    let all: String = objects.files.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(all.matches("192.0.2.0/24").count(), 2, "{all}");
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    // 100,000 nested sequences on one line: dropping such a tree recursed
    // once per level.
    let text = format!("{}x\n", "- ".repeat(100_000));
    let imp = within(20, move || {
        import_dump_text("deep.yaml", text, &Options::default())
    });
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    assert!(report(&imp).contains("deep.yaml:1:"), "{}", report(&imp));
}

#[test]
fn a_long_scalar_is_refused_at_its_position() {
    let text = format!(
        "data:\n  cidrs: []\n  comment: {}\nmetadata: {{path: abuse/a, type: ipblock}}\n",
        "x".repeat(2 << 20)
    );
    let imp = within(30, move || {
        import_dump_text("long.yaml", text, &Options::default())
    });
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    let r = report(&imp);
    assert!(r.contains("--> long.yaml:3:12"), "{r}");
    assert!(r.contains("over the limit of 1048576 bytes"), "{r}");
}

/// CIDR number `i` of a generated ipblock.
fn cidr(i: usize) -> String {
    format!("10.{}.{}.{}/32", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

/// A dump of one ipblock of `n` CIDRs, one a line, the last invalid (so
/// that its position is reported).
fn big_ipblock(n: usize) -> String {
    let mut s = String::from("data:\n  comment: generated\n  cidrs:\n");
    for i in 0..n - 1 {
        s.push_str(&format!("  - {}\n", cidr(i)));
    }
    s.push_str("  - 10.0.0.0/33\nmetadata: {path: abuse/big, type: ipblock}\n");
    s
}

#[test]
fn positions_are_found_in_linear_time() {
    // Block style, one CIDR a line; then flow style, all on one line after
    // a non-ASCII comment (so that columns count characters, not bytes).
    let n = 50_000;
    let block = big_ipblock(n);
    let items: Vec<String> = (0..n - 1).map(|i| format!("'{}'", cidr(i))).collect();
    let line = format!("  cidrs: [{}, 10.0.0.0/33]", items.join(", "));
    let col = line.chars().count() - "10.0.0.0/33]".len() + 1;
    let flow = format!(
        "data:\n  comment: caf\u{e9}\n{line}\nmetadata: {{path: abuse/big, type: ipblock}}\n"
    );
    for (text, at) in [
        (block, format!("big.yaml:{}:5", n + 3)),
        (flow, format!("big.yaml:3:{col}")),
    ] {
        let t = Instant::now();
        // Old code: minutes; here well under a second optimised, a few
        // seconds unoptimised.
        let imp = within(60, move || {
            import_dump_text("big.yaml", text, &Options::default())
        });
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert_eq!(codes(&imp), [code::BAD_CIDR], "{}", report(&imp));
        assert!(
            report(&imp).contains(&format!("--> {at}\n")),
            "{at}: {}",
            report(&imp)
        );
    }
}

#[test]
fn a_symlink_out_of_the_tree_is_refused_and_its_file_never_quoted() {
    let base = tempdir("outside");
    let root = base.join("tree");
    write(&root.join("request-ipblocks/abuse/fine.yaml"), IPBLOCK);
    // Something YAML would choke on, so that reading it would quote it.
    let secret = base.join("secret");
    write(&secret, "root:SECRET-HASH:19000:0:99999:7:::\n[unclosed\n");
    symlink(&secret, &root.join("request-ipblocks/abuse/x.yaml"));
    symlink(
        Path::new("../../../secret"),
        &root.join("request-patterns/ua/y.yaml"),
    );
    let imp = import_tree(&root, 10);
    let r = report(&imp);
    assert!(!r.contains("SECRET"), "{r}");
    assert!(imp
        .sources
        .files()
        .iter()
        .all(|f| !f.text.contains("SECRET")));
    assert_eq!(codes(&imp), [code::OUTSIDE_ROOT, code::OUTSIDE_ROOT], "{r}");
    assert!(r.contains("x.yaml` leads outside the tree's root"), "{r}");
    assert!(r.contains("y.yaml` leads outside the tree's root"), "{r}");
}

#[test]
fn a_symlink_to_slash_is_not_walked() {
    let root = tree("slash");
    symlink(Path::new("/"), &root.join("request-ipblocks/slash"));
    symlink(Path::new("/etc"), &root.join("request-patterns"));
    let imp = import_tree(&root, 10);
    let r = report(&imp);
    assert_eq!(codes(&imp), [code::OUTSIDE_ROOT, code::OUTSIDE_ROOT], "{r}");
    assert!(r.contains("slash` leads outside"), "{r}");
    assert!(r.contains("request-patterns` leads outside"), "{r}");
    // Nothing below / was listed, let alone read.
    assert!(imp.notes.is_empty(), "{r}");
    assert_eq!(imp.sources.files().len(), 1, "{r}");
}

#[test]
fn symlinks_that_stay_in_the_tree_are_followed() {
    let root = tree("inside");
    write(&root.join("shared/cloud.yaml"), IPBLOCK);
    symlink(Path::new("../shared"), &root.join("request-ipblocks/cloud"));
    symlink(
        Path::new("fine.yaml"),
        &root.join("request-ipblocks/abuse/again.yaml"),
    );
    let imp = import_tree(&root, 10);
    assert!(!imp.diagnostics.has_errors(), "{}", report(&imp));
    let objects = imp.rulesets.iter().find(|r| r.dir == "objects").unwrap();
    let text: String = objects.files.iter().map(|f| f.text.as_str()).collect();
    for name in ["abuse/fine", "abuse/again", "cloud/cloud"] {
        assert!(text.contains(name), "{name}: {text}");
    }
}

#[test]
fn a_fifo_in_a_tree_is_refused_without_blocking() {
    let root = tree("fifo-tree");
    let fifo = root.join("request-ipblocks/abuse/pipe.yaml");
    mkfifo(&fifo);
    let imp = import_tree(&root, 10);
    assert_eq!(codes(&imp), [code::NOT_REGULAR], "{}", report(&imp));
    let r = report(&imp);
    assert!(
        r.contains("pipe.yaml` is a FIFO, not a regular file"),
        "{r}"
    );
}

#[test]
fn a_fifo_dump_is_refused_without_blocking() {
    let dir = tempdir("fifo-dump");
    let fifo = dir.join("dump.yaml");
    mkfifo(&fifo);
    let imp = import_tree(&fifo, 10);
    assert_eq!(codes(&imp), [code::NOT_REGULAR], "{}", report(&imp));
    assert!(report(&imp).contains("is a FIFO, not a regular file"));
}

#[test]
fn a_socket_in_a_tree_is_refused() {
    let root = tree("socket");
    let sock = root.join("request-ipblocks/abuse/sock.yaml");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let imp = import_tree(&root, 10);
    assert_eq!(codes(&imp), [code::NOT_REGULAR], "{}", report(&imp));
    assert!(report(&imp).contains("sock.yaml` is a socket"));
}

#[test]
fn dev_zero_as_a_dump_is_refused_without_reading() {
    let imp = import_tree(Path::new("/dev/zero"), 10);
    assert_eq!(codes(&imp), [code::NOT_REGULAR], "{}", report(&imp));
    assert!(report(&imp).contains("`/dev/zero` is a character device"));
}

#[test]
fn a_file_over_the_size_limit_is_refused_before_it_is_parsed() {
    // One 100 MB scalar: parsing it took 1.27 GB.
    let root = tree("huge");
    let mut text = String::with_capacity(100 << 20);
    text.push_str("cidrs: []\ncomment: ");
    text.extend(std::iter::repeat_n('x', 100 << 20));
    write(&root.join("request-ipblocks/abuse/huge.yaml"), &text);
    drop(text);
    let imp = import_tree(&root, 20);
    assert_eq!(codes(&imp), [code::TOO_LARGE], "{}", report(&imp));
    let r = report(&imp);
    assert!(
        r.contains("huge.yaml` is over the size limit of 64 MiB"),
        "{r}"
    );
    // Only the small file was kept.
    assert_eq!(imp.sources.files().len(), 1, "{r}");
}

fn import_with(root: &Path, limits: crate::Limits) -> Imported {
    let root = root.to_path_buf();
    let opts = Options {
        limits,
        ..Options::default()
    };
    within(10, move || import_path(&root, &opts))
}

#[test]
fn the_per_file_limit_holds_for_a_tree_and_a_dump() {
    let root = tree("file-limit");
    let big = format!("cidrs:\n- 192.0.2.0/24\ncomment: {}\n", "x".repeat(2000));
    write(&root.join("request-ipblocks/abuse/big.yaml"), &big);
    let limits = crate::Limits {
        max_file_bytes: 1000,
        ..crate::Limits::default()
    };
    let imp = import_with(&root, limits.clone());
    assert_eq!(codes(&imp), [code::TOO_LARGE], "{}", report(&imp));
    assert!(report(&imp).contains("big.yaml` is over the size limit of 1000 bytes"));
    let imp = import_with(&root.join("request-ipblocks/abuse/big.yaml"), limits);
    assert_eq!(codes(&imp), [code::TOO_LARGE], "{}", report(&imp));
}

#[test]
fn the_total_limit_stops_the_walk() {
    let root = tempdir("total-limit");
    for i in 0..5 {
        write(
            &root.join(format!("request-ipblocks/abuse/b{i}.yaml")),
            IPBLOCK,
        );
    }
    let limits = crate::Limits {
        max_total_bytes: 2 * IPBLOCK.len() + 10,
        ..crate::Limits::default()
    };
    let imp = import_with(&root, limits);
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    let r = report(&imp);
    assert!(
        r.contains("over the limit of") && r.contains("stopped at"),
        "{r}"
    );
    assert!(r.contains("b2.yaml"), "{r}");
    assert_eq!(imp.sources.files().len(), 2, "{r}");
}

#[test]
fn the_entry_limit_stops_the_walk() {
    let root = tempdir("entry-limit");
    for i in 0..20 {
        write(&root.join(format!("request-ipblocks/s{i}/b.yaml")), IPBLOCK);
    }
    let limits = crate::Limits {
        max_entries: 10,
        ..crate::Limits::default()
    };
    let imp = import_with(&root, limits);
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    assert!(report(&imp).contains("more than 10 files and directories"));
    assert!(imp.rulesets.is_empty());
}

#[test]
fn the_node_limits_hold_for_a_file_and_for_a_tree() {
    let root = tree("node-limit");
    let mut many = String::from("cidrs:\n");
    for i in 0..2000 {
        many.push_str(&format!("- {}\n", cidr(i)));
    }
    write(&root.join("request-ipblocks/cloud/many.yaml"), &many);
    let mut limits = crate::Limits::default();
    limits.yaml.max_nodes = 1000;
    let imp = import_with(&root, limits);
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    let r = report(&imp);
    // Node 1001: the mapping, its key `cidrs`, the list, 998 items.
    assert!(r.contains("more than 1000 YAML values"), "{r}");
    assert!(r.contains("--> ") && r.contains("many.yaml:999:3"), "{r}");

    // Each file is within a file's limit (6 and 2003 nodes), not both
    // within the tree's.
    let limits = crate::Limits {
        max_total_nodes: 2005,
        ..crate::Limits::default()
    };
    let imp = import_with(&root, limits);
    assert_eq!(codes(&imp), [code::LIMIT], "{}", report(&imp));
    let r = report(&imp);
    assert!(
        r.contains("more than 2005 YAML values, lists and mappings in all"),
        "{r}"
    );
    assert!(r.contains("stopped at") && r.contains("many.yaml"), "{r}");
}
