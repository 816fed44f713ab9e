//go:build tools

// Package tools pins kind, built by scripts/kind/build.
package tools

import _ "sigs.k8s.io/kind"
