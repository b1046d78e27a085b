// Command testsummary reads `go test -json` on stdin, prints each package's
// result and the output of failed tests, and ends with one summary line
// "N passed, N failed, N skipped". It exits non-zero when anything failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	label := "tests"
	if len(os.Args) > 1 {
		label = os.Args[1]
	}
	var passed, failed, skipped int
	output := map[string]*strings.Builder{}
	var failedTests []string
	pkgFailed := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// Build errors and other non-JSON lines go straight through.
			fmt.Println(string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			b := output[key]
			if b == nil {
				b = &strings.Builder{}
				output[key] = b
			}
			b.WriteString(e.Output)
			if e.Test == "" && (strings.HasPrefix(e.Output, "ok") || strings.HasPrefix(e.Output, "FAIL") ||
				strings.HasPrefix(e.Output, "?") || strings.HasPrefix(e.Output, "panic") ||
				strings.Contains(e.Output, "[setup failed]") || strings.Contains(e.Output, "[build failed]")) {
				fmt.Print(e.Output)
			}
		case "pass":
			if e.Test != "" {
				passed++
			}
			delete(output, key)
		case "skip":
			if e.Test != "" {
				skipped++
			}
			delete(output, key)
		case "fail":
			if e.Test != "" {
				failed++
				failedTests = append(failedTests, key)
				fmt.Printf("--- FAIL: %s (%s, %.1fs)\n", e.Test, e.Package, e.Elapsed)
				if b := output[key]; b != nil {
					fmt.Print(indent(b.String()))
				}
			} else {
				pkgFailed = true
				if b := output[key]; b != nil && !strings.Contains(b.String(), "--- FAIL") {
					fmt.Print(indent(b.String()))
				}
			}
		}
	}
	sort.Strings(failedTests)
	if len(failedTests) > 0 {
		fmt.Printf("failed %s:\n", label)
		for _, t := range failedTests {
			fmt.Println("  " + t)
		}
	}
	fmt.Printf("%s: %d passed, %d failed, %d skipped\n", label, passed, failed, skipped)
	if failed > 0 || pkgFailed {
		os.Exit(1)
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	return b.String()
}
