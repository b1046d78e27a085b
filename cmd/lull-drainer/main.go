// Command lull-drainer runs lull's controllers: today the MaintenanceWindow
// status controller; the drain controller joins it.
package main

import (
	"os"

	_ "time/tzdata" // evaluate IANA zones without relying on the OS image

	"lull.dev/lull/drainer/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:]))
}
