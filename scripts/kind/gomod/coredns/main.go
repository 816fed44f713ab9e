// Command coredns is CoreDNS with only the plugins kubeadm's default Corefile uses (errors,
// health, ready, kubernetes, prometheus, forward, cache, loop, reload, loadbalance, plus log), so
// the offline kind node image builds it from the Go module proxy in minutes rather than with
// every cloud plugin CoreDNS ships. CoreDNS documents building with one's own main and plugin
// imports ("compile-time configuration").
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
