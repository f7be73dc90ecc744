#!/usr/bin/env bash
# Builds rctl's Debian package, target/debian/rctl_VERSION-1_ARCH.deb:
# the XDP program built into a stripped rctl, man pages and completions
# written by `rctl generate` (from the same flag definitions as the
# parser), the systemd units, /etc/default/rctl and the logrotate snippet
# of this folder. Needs what .ci/test.sh installs (nightly, bpf-linker)
# and cargo-deb.
set -euo pipefail
cd "$(dirname "$0")/../../.."

(cd ebpf/rctl-xdp && cargo +nightly build --locked -Z build-std=core --target bpfel-unknown-none --release)
export RCTL_XDP_OBJECT="$PWD/ebpf/rctl-xdp/target/bpfel-unknown-none/release/rctl-xdp"
test -s "$RCTL_XDP_OBJECT"
cargo build --release --locked -p rctl

assets=target/deb-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
target/release/rctl generate man "$assets/man"
gzip -9n "$assets"/man/*.1
target/release/rctl generate completions bash > "$assets/completions/rctl"
target/release/rctl generate completions zsh > "$assets/completions/_rctl"
target/release/rctl generate completions fish > "$assets/completions/rctl.fish"

# Stripped: the profile keeps debug info for benchmarks and backtraces.
cargo deb --no-build --strip --locked -p rctl "$@"
ls -l target/debian/*.deb
