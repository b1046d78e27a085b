// Command lull-scheduler is kube-scheduler with the NodeDisruption plugin,
// run as a secondary scheduler (pods opt in with schedulerName).
package main

import (
	"os"

	_ "time/tzdata" // windows name IANA zones; do not rely on the OS image

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"lull.dev/lull/plugins/nodedisruption"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(nodedisruption.Name, nodedisruption.New))
	os.Exit(cli.Run(cmd))
}
