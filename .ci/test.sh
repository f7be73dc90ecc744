#!/usr/bin/env bash
# The test command (see README.md): installs what it needs, then runs
# formatting, lints, every test, the shipped rules' own tests, and the fuzz
# targets (built, corpus replayed, then a short fuzzing run each).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchains and tools"
# tshark is the independent reference the dry-run tests cross-check
# against; chromium renders the HTML report in a test; the namespace tests
# drive real traffic with ip, ping and python3, and drop privileges with
# setpriv.
missing=""
command -v tshark >/dev/null || missing="$missing tshark"
command -v chromium >/dev/null || missing="$missing chromium"
command -v ip >/dev/null || missing="$missing iproute2"
command -v ping >/dev/null || missing="$missing iputils-ping"
command -v python3 >/dev/null || missing="$missing python3"
# The hostile-neighbour tests run their attackers as nobody with Debian's
# python (another user cannot run a python under /root).
[ -x /usr/bin/python3 ] || missing="$missing python3"
command -v setpriv >/dev/null || missing="$missing util-linux"
# GNU time measures rctl's peak RSS in the dry-run memory test.
[ -x /usr/bin/time ] || missing="$missing time"
# The edge proxies the live agent and the emitted configurations are
# tested with (Debian's own packages, started by the tests on loopback):
# HAProxy 2.6, nginx 1.22 (auth_request), Varnish 7.1 with varnish-modules
# (vsthrottle); wrk drives load in the agent's tests and benchmarks.
command -v haproxy >/dev/null || missing="$missing haproxy"
command -v nginx >/dev/null || missing="$missing nginx"
command -v varnishd >/dev/null || missing="$missing varnish"
[ -e /usr/lib/x86_64-linux-gnu/varnish/vmods/libvmod_vsthrottle.so ] || missing="$missing varnish-modules"
command -v wrk >/dev/null || missing="$missing wrk"
# rctl's nginx module is built against Debian's nginx: nginx-dev has its
# sources and configure flags, bindgen (the ngx crate) needs libclang,
# and nginx's configure checks PCRE2, OpenSSL and zlib.
[ -f /usr/share/nginx/src/conf_flags ] || missing="$missing nginx-dev"
dpkg -s libclang-dev >/dev/null 2>&1 || missing="$missing libclang-dev"
for p in libpcre2-dev libssl-dev zlib1g-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
python3 -c 'import requests' 2>/dev/null || missing="$missing python3-requests"
# The requestctl round trip runs conftool's own reqconfig code (fetched
# from PyPI by `pip download`), which needs sympy and PyYAML.
python3 -c 'import sympy' 2>/dev/null || missing="$missing python3-sympy"
python3 -c 'import yaml' 2>/dev/null || missing="$missing python3-yaml"
python3 -m pip --version >/dev/null 2>&1 || missing="$missing python3-pip"
# The fleet: etcd (a three-member cluster on loopback) and Redis (shared
# limits) started by the fleet tests; etcd-client's build script runs protoc.
command -v etcd >/dev/null || missing="$missing etcd-server"
command -v etcdctl >/dev/null || missing="$missing etcd-client"
command -v redis-server >/dev/null || missing="$missing redis-server"
command -v redis-cli >/dev/null || missing="$missing redis-tools"
command -v protoc >/dev/null || missing="$missing protobuf-compiler"
# The package's test verifies its units (systemd-analyze), its logrotate
# snippet and man pages, and asks the agent with curl.
command -v systemd-analyze >/dev/null || missing="$missing systemd"
command -v logrotate >/dev/null || missing="$missing logrotate"
command -v man >/dev/null || missing="$missing man-db"
command -v curl >/dev/null || missing="$missing curl"
# rctl suggest's live test captures the edge's traffic with tcpdump.
command -v tcpdump >/dev/null || missing="$missing tcpdump"
# The fleet's TLS test makes its CA and certificates with openssl.
command -v openssl >/dev/null || missing="$missing openssl"
# The rctl wheel's tests: a virtualenv for it, and Java for the Spark job's
# (pyspark in local mode).
python3 -c 'import ensurepip' 2>/dev/null || missing="$missing python3-venv"
command -v java >/dev/null || missing="$missing openjdk-17-jre-headless"
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing >/dev/null
fi
rustup component add rustfmt clippy >/dev/null
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "the nightly toolchain is required for cargo-fuzz (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

step "the XDP program"
# The eBPF toolchain: rust-src for build-std, LLVM 22 for bpf-linker.
rustup component add rust-src --toolchain nightly >/dev/null
if ! command -v bpf-linker >/dev/null; then
  if ! dpkg -s llvm-22-dev >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq llvm-22-dev >/dev/null
  fi
  LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker@0.13.0 --locked --no-default-features --features llvm-22
fi
(cd ebpf/rctl-xdp && cargo +nightly build --locked -Z build-std=core --target bpfel-unknown-none --release)
export RCTL_XDP_OBJECT="$PWD/ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp"
test -s "$RCTL_XDP_OBJECT"

step "rctl's nginx module (against Debian's nginx)"
dataplane/nginx/build-module.sh
dataplane/nginx/build-module.sh --clippy

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "the Debian package"
# Built as an operator builds it (release rctl with the XDP program in,
# man pages, completions, units); tests/package.rs installs and purges it.
if ! cargo deb --version 2>/dev/null | grep -q '3\.8\.0'; then
  cargo install cargo-deb@3.8.0 --locked
fi
bash dataplane/cli/debian/build.sh
RCTL_DEB="$(ls "$PWD"/target/debian/rctl_*.deb)"
export RCTL_DEB

step "cargo test"
cargo test --workspace --locked

step "the rctl wheel and the Spark job (dataplane/python)"
# The wheel (maturin, debug: its dependencies are those cargo test just
# built) into a fresh virtualenv with what it declares (pyarrow) and
# pandas; its own tests against target/debug/rctl, then pyspark from PyPI
# and the Spark job's tests on one local[2] session.
python_started=$SECONDS
venv="$PWD/target/python-ci/venv"
rm -rf "$PWD/target/python-ci"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.5,<2'
"$venv/bin/maturin" build -q --locked -m dataplane/python/Cargo.toml -o target/python-ci/dist
"$venv/bin/pip" install -q --disable-pip-version-check target/python-ci/dist/rctl-*.whl 'pandas>=2.0,<2.3'
(cd dataplane/python/tests && RCTL_BIN="$OLDPWD/target/debug/rctl" "$venv/bin/python" -m unittest -v test_wheel)
"$venv/bin/pip" install -q --disable-pip-version-check 'pyspark>=3.5,<3.6'
(cd dataplane/python/tests && RCTL_BIN="$OLDPWD/target/debug/rctl" "$venv/bin/python" -m unittest -v test_spark)
echo "the wheel and the Spark job: $((SECONDS - python_started)) s"

step "rctl check and rctl test on the shipped rules"
# The release rctl the package step built (with the XDP program in).
./target/release/rctl check --deny-warnings rules/
./target/release/rctl test rules/

step "fuzz targets: build, replay the seeds, fuzz briefly"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
# One target directory for every fuzz crate: the engine and its
# dependencies are built once for all of them, not once per crate.
export CARGO_TARGET_DIR="$PWD/target/fuzz"
(
  cd compiler
  cargo +nightly fuzz build --sanitizer none
  for target in compile; do
    mkdir -p "fuzz/corpus/$target"
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- -runs=0
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
      -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 -rss_limit_mb=2048
  done
)

(
  cd compiler/import
  cargo +nightly fuzz build --sanitizer none
  mkdir -p fuzz/corpus/requestctl_dump
  cargo +nightly fuzz run --sanitizer none requestctl_dump fuzz/corpus/requestctl_dump fuzz/seeds/requestctl_dump -- -runs=0
  cargo +nightly fuzz run --sanitizer none requestctl_dump fuzz/corpus/requestctl_dump fuzz/seeds/requestctl_dump -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048
)

(
  cd dataplane
  cargo +nightly fuzz build --sanitizer none
  mkdir -p fuzz/corpus/request
  cargo +nightly fuzz run --sanitizer none request fuzz/corpus/request fuzz/seeds/request -- -runs=0
  cargo +nightly fuzz run --sanitizer none request fuzz/corpus/request fuzz/seeds/request -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048
  mkdir -p fuzz/corpus/artifact
  cargo +nightly fuzz run --sanitizer none artifact fuzz/corpus/artifact fuzz/seeds/artifact -- -runs=0
  cargo +nightly fuzz run --sanitizer none artifact fuzz/corpus/artifact fuzz/seeds/artifact -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 -rss_limit_mb=2048
  mkdir -p fuzz/corpus/suggest
  cargo +nightly fuzz run --sanitizer none suggest fuzz/corpus/suggest fuzz/seeds/suggest -- -runs=0
  cargo +nightly fuzz run --sanitizer none suggest fuzz/corpus/suggest fuzz/seeds/suggest -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=10 -rss_limit_mb=2048
  mkdir -p fuzz/corpus/capture
  cargo +nightly fuzz run --sanitizer none capture fuzz/corpus/capture fuzz/seeds/capture -- -runs=0
  cargo +nightly fuzz run --sanitizer none capture fuzz/corpus/capture fuzz/seeds/capture -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=65536 -timeout=10 -rss_limit_mb=2048
  mkdir -p fuzz/corpus/zone
  cargo +nightly fuzz run --sanitizer none zone fuzz/corpus/zone fuzz/seeds/zone -- -runs=0
  cargo +nightly fuzz run --sanitizer none zone fuzz/corpus/zone fuzz/seeds/zone -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048
)

(
  cd dataplane/logs
  cargo +nightly fuzz build --sanitizer none
  for target in haproxy nginx varnishncsa webrequest; do
    mkdir -p "fuzz/corpus/$target"
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- -runs=0
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
      -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048
  done
  # Compressed logs: whole gzip and zstd files, damaged and cut short.
  mkdir -p fuzz/corpus/compressed
  cargo +nightly fuzz run --sanitizer none compressed fuzz/corpus/compressed fuzz/seeds/compressed -- -runs=0
  cargo +nightly fuzz run --sanitizer none compressed fuzz/corpus/compressed fuzz/seeds/compressed -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=16384 -timeout=10 -rss_limit_mb=2048
  # Parquet files: whole files as inputs, so longer ones.
  mkdir -p fuzz/corpus/parquet
  cargo +nightly fuzz run --sanitizer none parquet fuzz/corpus/parquet fuzz/seeds/parquet -- -runs=0
  cargo +nightly fuzz run --sanitizer none parquet fuzz/corpus/parquet fuzz/seeds/parquet -- \
    -max_total_time="$FUZZ_SECONDS" -max_len=32768 -timeout=10 -rss_limit_mb=2048
)

(
  cd dataplane/agent
  cargo +nightly fuzz build --sanitizer none
  for target in spop_frame spop_session; do
    mkdir -p "fuzz/corpus/$target"
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- -runs=0
    cargo +nightly fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
      -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048
  done
)

step "all green"
