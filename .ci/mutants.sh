#!/bin/sh
# Mutation testing of the modules that carry the semantics (cargo-mutants).
# Not part of every CI run: it rebuilds the workspace once per mutant.
#
#   cargo install --locked cargo-mutants      # 27.1.0 builds on Rust 1.95
#   .ci/mutants.sh [group...]                 # default: every group
#   MUTANTS_ITERATE=1 .ci/mutants.sh limiter  # retest only the last survivors
#   MUTANTS_JOBS=2 .ci/mutants.sh tables      # two mutants at a time
#
# Groups (each: files, the tests that judge them; time on the 2-core VM):
#   tables   dataplane/src/iptable.rs, the XDP lowering (Tables::with_config,
#            intervals in dataplane/src/xdp/mod.rs; the direct tables in
#            dataplane/src/xdp/dir.rs: 391 mutants with them, ~2 h)
#   limiter  dataplane/src/limiter/ (local GCRA, vsthrottle, shared; 221)
#   engine   dataplane/src/core.rs, dataplane/src/matcher.rs (135, ~100 min)
#   shared   dataplane/src/limiter/shared.rs alone, by the limiter's unit
#            tests (the fleet's Redis tests need servers; 130, ~25 min)
#   artifact compiler/src/artifact/mod.rs, the encoder and decoder (61, ~40 min)
#   analysis compiler/src/analysis/mod.rs: overlap, exemptions, reachability,
#            by the compiler's unit tests (its brute-force oracle among
#            them; 197, ~10 min with MUTANTS_JOBS=2)
#   program  ebpf/rctl-loader/src/program.rs, the loader, by the root XDP and
#            veth tests (root and RCTL_XDP_OBJECT; 73, ~75 min; not in the
#            default groups)
#
# One job at a time (-j1) with a test timeout per mutant (20 s where the tests take about
# 4 s, 90 s for the slower groups); the tests
# run are the unit tests of the mutated crate and the integration modules
# that exercise it (no root, no servers: see $skip). Results land in
# mutants.out/<group>/ (outcomes.json, caught.txt, missed.txt, timeout.txt,
# unviable.txt); .ci/README.md ("Mutation testing") records the last
# run. Survivors judged equivalent are listed there.
set -eu
cd "$(dirname "$0")/.."
out=${MUTANTS_OUT:-mutants.out}
run() {
    group=$1
    timeout=$2
    shift 2
    echo "== $group" >&2
    mkdir -p "$out/$group"
    cargo mutants --workspace --no-shuffle -j"${MUTANTS_JOBS:-1}" --timeout "$timeout" --build-timeout 600 \
        --baseline skip ${MUTANTS_ITERATE:+--iterate} -o "$out/$group" "$@" || true
    for f in caught missed timeout unviable; do
        printf '%s %s: %s\n' "$group" "$f" \
            "$(cat "$out/$group/mutants.out/$f.txt" 2>/dev/null | wc -l)"
    done
}
groups=${*:-tables limiter engine artifact analysis}
# Never the tests that start servers or need root: a timed-out mutant
# would leave their processes behind, and they skip outside CI anyway.
skip='--skip edge:: --skip agent:: --skip netns --skip host_state --skip xdp::'
# MUTANTS_XDP=1 (root, with RCTL_XDP_OBJECT naming the built program, as
# .ci/test.sh does): the tables are also judged by the XDP program itself
# through BPF_PROG_TEST_RUN (the parity tests; nothing outlives a test).
xdp=
tables_timeout=20
if [ "${MUTANTS_XDP:-}" = 1 ]; then
    tables_timeout=120
    test -s "${RCTL_XDP_OBJECT:-}" || { echo "MUTANTS_XDP=1 needs RCTL_XDP_OBJECT" >&2; exit 2; }
    xdp='xdp::corpus_packets xdp::random_rulesets xdp::interval_table xdp::ipv6_interval'
fi
for g in $groups; do
    case $g in
    tables)
        run tables "$tables_timeout" --file dataplane/src/iptable.rs --file dataplane/src/xdp/mod.rs \
            --file dataplane/src/xdp/dir.rs \
            --re 'iptable|xdp/dir\.rs|Tables::|intervals' \
            --test-package rctl-dataplane --test-package rctl \
            -- --lib --test integration --test xdp_tables \
            -- iptable xdp_tables adjacent_and_nested direct_tables xdp::tests:: xdp_dir:: invariants::the_xdp $xdp ;;
    limiter)
        run limiter 20 --file 'dataplane/src/limiter/*.rs' \
            --exclude 'dataplane/src/limiter/*tests.rs' \
            --test-package rctl-dataplane --test-package rctl \
            -- --lib --test integration -- limiter throttle ban shared $skip ;;
    engine)
        run engine 90 --file dataplane/src/core.rs --file dataplane/src/matcher.rs \
            --test-package rctl-dataplane --test-package rctl \
            -- --lib --test integration -- core matcher engine carry language:: corpus:: generated:: invariants:: $skip ;;
    shared)
        run shared 30 --file dataplane/src/limiter/shared.rs \
            --test-package rctl-dataplane -- --lib limiter ;;
    artifact)
        run artifact 90 --file compiler/src/artifact/mod.rs \
            --test-package rctl-compiler --test-package rctl \
            -- --lib --test integration -- artifact invariants:: $skip ;;
    analysis)
        run analysis 30 --file compiler/src/analysis/mod.rs \
            --test-package rctl-compiler -- --lib ;;
    program)
        # The loader: judged only by the root XDP and veth tests.
        test -s "${RCTL_XDP_OBJECT:-}" || { echo "the program group needs root and RCTL_XDP_OBJECT" >&2; exit 2; }
        export CI=true
        run program 240 --file ebpf/rctl-loader/src/program.rs \
            --test-package rctl-loader --test-package rctl \
            -- --lib --test integration -- xdp netns:: ;;
    *) echo "unknown group $g" >&2; exit 2 ;;
    esac
done
