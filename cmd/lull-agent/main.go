// Command lull-agent carries out a NodeMaintenance's host steps (the
// host kinds of api/v1alpha1's step catalog: WriteFiles, DaemonReload,
// ReloadService, RestartService, Reboot, PowerOff) on its own node, under the node's
// disruption lease; it runs as a DaemonSet (docs/agent.md).
package main

import (
	"os"

	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"lull.dev/lull/agent"
)

func main() {
	os.Exit(agent.Run(os.Args[1:]))
}
