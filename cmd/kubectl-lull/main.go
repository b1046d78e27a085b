// Command kubectl-lull is lull's kubectl plugin: `kubectl lull lease ...`.
package main

import (
	"os"

	"lull.dev/lull/pkg/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
