#!/usr/bin/env bash
# Builds ngx_http_rctl_module.so against this host's Debian nginx:
# configures a copy of the nginx-dev tree (/usr/share/nginx/src) with
# Debian's own configure flags (its conf_flags file), so that the module's
# binary compatibility signature is the one /usr/sbin/nginx checks, then
# builds the crate with feature `module` against it (the ngx crate reads
# NGINX_SOURCE_DIR and NGINX_BUILD_DIR; only `configure` is needed).
#
#   dataplane/nginx/build-module.sh [--release]   # -> target/{debug,release}/ngx_http_rctl_module.so
#   dataplane/nginx/build-module.sh --clippy      # clippy -D warnings on the module's FFI side
#
# Needs: nginx-dev, libclang-dev (bindgen), libpcre2-dev, libssl-dev,
# zlib1g-dev (configure checks them). CARGO_BUILD_JOBS is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
src=/usr/share/nginx/src
tree="${CARGO_TARGET_DIR:-$root/target}/nginx-debian"
profile=debug
args=()
mode=build
case "${1:-}" in
  --release) profile=release; args=(--release) ;;
  --clippy) mode=clippy ;;
  "") ;;
  *) echo "usage: $0 [--release|--clippy]" >&2; exit 2 ;;
esac
if [ ! -f "$src/conf_flags" ]; then
  echo "build-module.sh: $src/conf_flags is missing: apt-get install nginx-dev" >&2
  exit 1
fi
# Configure again only when Debian's tree changed (a new nginx-dev).
stamp="$(cat "$src/conf_flags" "$src/src/core/nginx.h" | sha256sum | cut -c1-16)"
if [ "$(cat "$tree/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$tree"
  mkdir -p "$tree"
  cp -r "$src" "$tree/src"
  (
    cd "$tree/src"
    # shellcheck disable=SC1091
    . ./conf_flags
    ./configure "${NGX_CONF_FLAGS[@]}" --builddir="$tree/objs" >"$tree/configure.log" 2>&1
  ) || { tail -20 "$tree/configure.log" >&2; exit 1; }
  echo "$stamp" >"$tree/stamp"
fi
export NGINX_SOURCE_DIR="$tree/src" NGINX_BUILD_DIR="$tree/objs"
cd "$root"
if [ "$mode" = clippy ]; then
  exec cargo clippy --locked -p rctl-nginx --features module --all-targets -- -D warnings
fi
cargo build --locked -p rctl-nginx --features module "${args[@]}"
out="${CARGO_TARGET_DIR:-$root/target}/$profile"
cp "$out/libngx_http_rctl_module.so" "$out/ngx_http_rctl_module.so"
echo "$out/ngx_http_rctl_module.so"
