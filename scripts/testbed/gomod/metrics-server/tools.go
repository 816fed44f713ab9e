//go:build tools

// Package tools pins metrics-server, built by scripts/testbed/build.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
