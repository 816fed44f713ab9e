#!/usr/bin/env bash
# Shared by the scripts under scripts/kind: the pinned versions of kind and of everything the
# offline node image holds, and where their builds are cached (outside the clone, by version).

source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
HELM_VERSION="${HELM_VERSION:-v4.3.1}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
# The image tags kubeadm v1.36 asks for (cmd/kubeadm/app/constants: CoreDNSVersion,
# DefaultEtcdVersion, PauseVersion). The etcd image carries the testbed's etcd (ETCD_VERSION)
# under kubeadm's tag; the offline images exist only inside the node image.
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.2}"
KUBEADM_ETCD_TAG="${KUBEADM_ETCD_TAG:-3.6.8-0}"
PAUSE_VERSION="${PAUSE_VERSION:-3.10.2}"
# The Debian suite of every image built here (the node, the control plane images, ours).
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"

# shellcheck disable=SC2034 # used by the scripts that source this file
KIND_GOMOD="$REPO_ROOT/scripts/kind/gomod"
# Built Go tools: kind, helm, crictl, coredns, kubelet, kubeadm, kube-proxy.
kind_bin_dir() {
  echo "$VK_CACHE/bin/kind-$KIND_VERSION-k8s-$K8S_VERSION-helm-$HELM_VERSION-crictl-$CRICTL_VERSION-coredns-$COREDNS_VERSION"
}
# The node image built offline; its tag changes whenever a version or a file it holds changes.
node_image_tag() {
  local sum
  sum="$({
    echo "$K8S_VERSION $ETCD_VERSION $KIND_VERSION $CRICTL_VERSION $COREDNS_VERSION"
    echo "$KUBEADM_ETCD_TAG $PAUSE_VERSION $DEBIAN_SUITE"
    cat "$REPO_ROOT"/scripts/kind/node/* "$REPO_ROOT"/scripts/kind/net/* "$REPO_ROOT"/scripts/kind/pause/* \
      "$REPO_ROOT"/scripts/kind/runc-caps/main.go "$REPO_ROOT/scripts/kind/build-node"
  } | sha256sum | cut -c1-12)"
  echo "gpu-vk/kind-node:$K8S_VERSION-$sum"
}
