//go:build tools

// Package tools pins helm, built by scripts/kind/build.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
