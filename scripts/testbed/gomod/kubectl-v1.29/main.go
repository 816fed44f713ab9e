// Command kubectl: the kubectl of Kubernetes 1.29, the last minor whose exec, attach and
// port-forward speak SPDY only (WebSockets came as an opt-in in 1.29 and the default in 1.30),
// built for the tests that show the VK serves such clients (see scripts/testbed/build).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
