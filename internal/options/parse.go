package options

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"lull.dev/lull/internal/version"
)

// Parse reads a lull binary's command line into fs, which holds the
// component's flags (Parse adds --version): it prints the version and
// stops, refuses invalid flags with one line each on errOut, and applies
// the logging options. It returns whether to run and, if not, the exit
// code (0 after --version, 2 for a usage error).
func Parse(component string, fs *pflag.FlagSet, args []string, validate func() []error, logs *logsapi.LoggingConfiguration,
	out, errOut io.Writer) (exit int, run bool) {
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2, false
	}
	if *showVersion {
		fmt.Fprintln(out, version.Line(component))
		return 0, false
	}
	if errs := validate(); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(errOut, "%s: %v\n", component, err)
		}
		return 2, false
	}
	// Validate checked the logging options too; this applies them.
	if err := logsapi.ValidateAndApply(logs, nil); err != nil {
		fmt.Fprintf(errOut, "%s: %v\n", component, err)
		return 2, false
	}
	return 0, true
}
