//go:build tools

// Package tools pins the Kubernetes 1.37 commands scripts/testbed/build makes for a testbed of
// that minor (K8S_VERSION=v1.37.2): the control plane and kubectl.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
