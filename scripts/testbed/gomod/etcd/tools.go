//go:build tools

// Package tools pins the etcd server built by scripts/testbed/build.
package tools

import _ "go.etcd.io/etcd/server/v3"
