//! `rctl suggest`: whatever the traffic holds (any bytes in its hosts, paths,
//! User-Agents and header values), the suggester does not panic and every
//! rule it writes, with its test block, compiles.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rctl_suggest::{count, find::find, measure, write, Bounds, Obs, Options, Recorded};
use std::net::{IpAddr, Ipv4Addr};

fn obs(t: u64, ip: IpAddr, host: &[u8], target: &[u8], ua: &[u8], extra: &[u8]) -> Obs {
    Obs {
        input: u32::MAX,
        time_ns: t * 500_000_000,
        ip,
        dst: None,
        port: 443,
        method: b"GET".to_vec(),
        host: host.to_vec(),
        target: target.to_vec(),
        headers: vec![
            (b"Host".to_vec(), host.to_vec()),
            (b"User-Agent".to_vec(), ua.to_vec()),
            (b"Cache-Control".to_vec(), extra.to_vec()),
        ],
        cut: Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.split(|&b| b == 0xff).take(8).collect();
    let part = |i: usize| parts.get(i).copied().unwrap_or_default();
    let (host, path, ua, extra) = (part(0), part(1), part(2), part(3));
    let mut target = b"/".to_vec();
    target.extend_from_slice(path);
    let mut traffic = Vec::new();
    // One heavy address, a swarm of twelve, one page re-requested, and
    // readers: every kind of finding can be made from the input.
    for t in 0..120u64 {
        let heavy = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        traffic.push(obs(t, heavy, host, &target, ua, extra));
        let swarm = IpAddr::V4(Ipv4Addr::new(198, 51, (t % 12) as u8, 7));
        traffic.push(obs(t, swarm, host, &target, part(4), extra));
        let looped = IpAddr::V4(Ipv4Addr::new(203, 0, 113, (t % 3) as u8));
        traffic.push(obs(t, looped, host, part(5), ua, b"no-cache"));
    }
    for r in 0..6u8 {
        let reader = IpAddr::V4(Ipv4Addr::new(203, 0, 114, r));
        let mut page = part(5).to_vec();
        page.push(b'0' + r);
        traffic.push(obs(u64::from(r), reader, host, &page, part(6), b""));
    }
    traffic.sort_by_key(|r| r.time_ns);
    let no = |_| false;
    let mut rec = Recorded {
        traffic: &traffic,
        inputs: &[],
    };
    // Small bounds, so that the eviction is fuzzed too.
    let bounds = Bounds {
        clients: 16,
        keys: 8,
        ips_per_agent: 8,
    };
    let o = Options::default();
    let counts = count(&mut rec, None, &no, &o, bounds).expect("no ruleset, no engine error");
    let findings = find(&counts, &o);
    let bucket = |i: usize| {
        // Both buckets: rctl's own, and vsthrottle's (what
        // `--requestctl` writes).
        if i % 2 == 0 {
            write::Bucket::Default
        } else {
            write::Bucket::Vsthrottle
        }
    };
    let rules = |findings: &[rctl_suggest::Finding], tests: bool| {
        let mut text = String::new();
        for (i, f) in findings.iter().enumerate() {
            let name = format!("suggested_{i}");
            if let Some(rule) = write::rule(f, &name, 1000 + 10 * i as i64, &f.what, bucket(i)) {
                text.push_str(&rule);
                if tests {
                    text.extend(write::test_block(f, &name));
                }
            }
        }
        text
    };
    let compiled = |text: &str| {
        let c = rctl_compiler::compile_str("suggested.rctl", text, &Default::default());
        assert!(
            !c.diagnostics.has_errors(),
            "{text}\n{:?}",
            c.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()
        );
        c.ruleset
    };
    let Some(merged) = compiled(&rules(&findings, false)) else {
        return;
    };
    let names = (0..findings.len()).map(|i| format!("suggested_{i}")).collect();
    let keep = rctl_suggest::headers_read(None);
    let measured = measure(&mut rec, merged, findings, names, &counts, keep, &no)
        .expect("the merged rules make an engine");
    let findings: Vec<_> = measured.into_iter().map(|m| m.finding).collect();
    compiled(&rules(&findings, true));
});
