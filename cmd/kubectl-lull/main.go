// Command kubectl-lull is lull's kubectl plugin: previews, requests,
// status and the node disruption lease from a shell (`kubectl lull ...`).
package main

import (
	"os"

	"lull.dev/lull/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
