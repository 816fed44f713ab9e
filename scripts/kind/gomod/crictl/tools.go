//go:build tools

// Package tools pins crictl (kind asks the node's CRI for images with it), built by scripts/kind/build.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
