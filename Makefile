# Entry points for users and CI. `make help` lists them.
#
#   make demo           testbed + emulated providers + virtual kubelet + a sample GPU workload
#   make test           everything CI runs (deps, lint, cargo test against a fresh testbed, then
#                       the conformance suite with the VK as a pod of a kind cluster)
#   make e2e KIND=1     only the kind conformance run
#   make demo-overflow  on kind: production overflowing to providers and coming back
#   eval "$(make -s testbed-up)"   a local control plane in this shell; `make testbed-down` ends it
#
# TESTBED_NAME selects a testbed (default "default"), so several run side by side.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Build caches live outside the clone, so fresh clones (CI) reuse them.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/gpu-vk/cargo-target
export CARGO_TERM_COLOR ?= never
# Toolchains in their usual places, also when the caller's PATH is minimal.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/.cargo/bin
# Env file of the real Slurm the Slurm adapter's tests use (written by scripts/slurm/up).
export SLURM_ENV_FILE ?= $(or $(VK_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpu-vk)/slurm/env
# Newer Slurm releases in containers (scripts/slurm/up --suite): 24.11 (trixie), 26.05 (sid).
export SLURM_SUITES ?= trixie sid
# The oldest and the newest Kubernetes minor supported, besides the default of the testbed
# (scripts/lib/common.sh's K8S_VERSION, 1.36); scripts/testbed/gomod/kubernetes-v1.<minor> pins
# each.
export K8S_OLDEST ?= v1.34.4
export K8S_NEWEST ?= v1.37.2
export SLURM_MORE_ENV_FILES ?= $(foreach s,$(SLURM_SUITES),$(or $(VK_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpu-vk)/slurm-$(s)/env)

CARGO ?= cargo
# The shell scripts under scripts/, found by their shebang (most have no .sh extension).
SHELL_SCRIPTS = $(shell find scripts -type f -exec awk 'FNR == 1 { if ($$0 ~ /^\#!.*[\/ ](ba|da)?sh( |$$)/) print FILENAME; nextfile }' {} + | sort)

.PHONY: help deps build lint fmt testbed-up testbed-down test flake-hunt e2e demo demo-stop demo-overflow bench slurm-up slurm-down

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

deps: ## install what the build and the testbed need (apt packages, rust components, control plane)
	@scripts/testbed/deps

build: ## cargo build of every crate and target
	$(CARGO) build --workspace --all-targets

lint: ## rustfmt check, clippy with warnings as errors, the house rules (layers, sizes), shellcheck, the Helm chart
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	scripts/lint-house --self-test
	scripts/lint-house
	@command -v shellcheck >/dev/null || { echo "shellcheck is not installed (make deps installs it)" >&2; exit 1; }
	shellcheck -x $(SHELL_SCRIPTS)
	scripts/lint-chart

fmt: ## format the code
	$(CARGO) fmt --all

testbed-up: ## start a local control plane; prints `export KUBECONFIG=...` (use with eval)
	@scripts/testbed/up

testbed-down: ## stop the testbed and remove its state (KEEP=1 keeps logs and data)
	@scripts/testbed/down

test: ## everything CI runs, each part timed against its budget (scripts/test): deps, lint, the real Slurms, cargo tests and the conformance suite on a fresh testbed, the oldest and newest supported Kubernetes, the conformance suite on kind
	@scripts/test

flake-hunt: deps ## run the conformance suite N times on one target and list every scenario that failed (N=5 TARGET=runpod [KIND=1] [FEATURES=a,b])
	@scripts/flake-hunt

slurm-up: ## start (or reuse) a real single-node Slurm 22.05 on 127.0.0.1, and 24.11 and 26.05 in containers (scripts/slurm/up)
	@scripts/slurm/up >/dev/null
	@for s in $(SLURM_SUITES); do scripts/slurm/up --suite $$s >/dev/null || exit 1; done

slurm-down: ## stop the Slurms started by slurm-up and remove their state (KEEP=1 keeps the host's)
	@scripts/slurm/down
	@for s in $(SLURM_SUITES); do scripts/slurm/down --suite $$s; done

e2e: deps slurm-up ## the conformance suite against a fresh testbed (KIND=1: VKs as pods of a kind cluster)
ifeq ($(KIND),1)
	@scripts/kind/e2e
else
	@CONFORMANCE_RUN=$${CONFORMANCE_RUN-local} TESTBED_NAME=e2e scripts/testbed/with $(CARGO) test -p conformance --test conformance
endif

demo: deps ## testbed, provider emulators, virtual kubelet and a sample GPU workload (KIND=1: the VK as a pod of kind)
ifeq ($(KIND),1)
	@scripts/kind/demo
else
	@scripts/demo
endif

demo-overflow: deps ## on kind: production overflows to providers when research takes the GPUs, and comes back
	@scripts/kind/demo-overflow

demo-stop: ## stop what `make demo` started (KIND=1: delete the demo's kind cluster)
ifeq ($(KIND),1)
	@scripts/kind/demo stop
else
	@scripts/demo stop
endif

bench: ## VK benchmark on a dedicated testbed -> target/bench/report.{json,md} (BENCH_ARGS="--quick")
	@scripts/bench $(BENCH_ARGS)
