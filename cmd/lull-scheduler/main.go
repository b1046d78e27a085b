// Command lull-scheduler is kube-scheduler with the NodeDisruption plugin,
// run as a secondary scheduler (pods opt in with schedulerName).
package main

import (
	"fmt"
	"os"
	"strings"
	_ "time/tzdata" // windows name IANA zones; do not rely on the OS image

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"lull.dev/lull/internal/memlimit"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/version"
	"lull.dev/lull/plugins/nodedisruption"
)

func main() {
	// kube-scheduler's own --version prints the version of
	// k8s.io/component-base it was stamped with, which lull's builds do
	// not stamp ("v0.0.0-master"): say what this binary is instead.
	if wantsVersion(os.Args[1:]) {
		fmt.Println(version.Line(settings.Scheduler))
		return
	}
	memlimit.Set(klog.Background().WithName(settings.Scheduler))
	cmd := app.NewSchedulerCommand(app.WithPlugin(nodedisruption.Name, nodedisruption.New))
	os.Exit(cli.Run(cmd))
}

// wantsVersion reports whether the arguments ask for the version
// (--version, --version=true or --version=raw, as kube-scheduler takes it).
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if v, ok := strings.CutPrefix(a, "--version"); ok && (v == "" || v == "=true" || v == "=raw") {
			return true
		}
	}
	return false
}
