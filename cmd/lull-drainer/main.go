// Command lull-drainer runs lull's controllers: NodeMaintenance (gates,
// cordon, drain, completion), MaintenanceWindow status and DisruptionPolicy
// status, with leader election.
package main

import (
	"os"

	_ "time/tzdata" // evaluate IANA zones without relying on the OS image

	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"lull.dev/lull/drainer/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:]))
}
