#!/usr/bin/env bash
# Shared helpers for the project's scripts: logging to stderr, the cache location, versions.

set -euo pipefail

# Versions of the control plane built for the testbed. Changing one rebuilds only that part.
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
METRICS_SERVER_VERSION="${METRICS_SERVER_VERSION:-v0.8.0}"

# Toolchains installed in their usual places but not on a minimal PATH (CI, cron, sudo).
for _d in /usr/local/go/bin "$HOME/go/bin" "$HOME/.cargo/bin"; do
  case ":$PATH:" in *":$_d:"*) ;; *) [ -d "$_d" ] && PATH="$PATH:$_d" ;; esac
done
unset _d
export PATH

# shellcheck disable=SC2034 # used by the scripts that source this file
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Caches live outside the clone so fresh clones (CI) reuse them; keyed by version below.
VK_CACHE="${VK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-vk}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$VK_CACHE/cargo-target}"

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' is not installed (run 'make deps')"
  done
}

# Directory holding the built control plane binaries for the pinned versions.
bin_dir() { echo "$VK_CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-ms-$METRICS_SERVER_VERSION"; }

# State folder of the testbed named by TESTBED_NAME (default "default"), or TESTBED_DIR if set.
testbed_dir() {
  if [ -n "${TESTBED_DIR:-}" ]; then echo "$TESTBED_DIR"; else echo "$VK_CACHE/testbeds/${TESTBED_NAME:-default}"; fi
}

# Quiet mode (QUIET=1) keeps only errors on stderr; used by `make test` so cargo's summary is last.
if [ "${QUIET:-0}" = 1 ]; then log() { :; }; fi

# Routes RFC 2544's benchmarking range 198.18.0.0/15 to the loopback interface (a `local`
# route), so that each emulated workload gets an address of its own that answers on this host
# (mock-providers/src/serve.rs) and pods on emulated providers have distinct pod IPs. Needs
# root (or sudo without a password); without it every emulated workload shares this host's
# address.
workload_addresses() {
  ip route show table local 2>/dev/null | grep -q '^local 198.18.0.0/15 ' && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  $sudo ip route add local 198.18.0.0/15 dev lo 2>/dev/null && return 0
  log "could not route 198.18.0.0/15 to lo (needs root): emulated workloads share this host's address"
}
