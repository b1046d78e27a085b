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
	sum := summary{output: map[string]*strings.Builder{}}
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
		sum.add(e)
	}
	sort.Strings(sum.failedTests)
	if len(sum.failedTests) > 0 {
		fmt.Printf("failed %s:\n", label)
		for _, t := range sum.failedTests {
			fmt.Println("  " + t)
		}
	}
	fmt.Printf("%s: %d passed, %d failed, %d skipped\n", label, sum.passed, sum.failed, sum.skipped)
	if sum.failed > 0 || sum.pkgFailed {
		os.Exit(1)
	}
}

// summary is what the events read so far say: the counts, the failed
// tests, whether a package failed outside its tests, and the output held
// for each test (package and name) until it ends.
type summary struct {
	passed, failed, skipped int
	failedTests             []string
	pkgFailed               bool
	output                  map[string]*strings.Builder
}

// add takes one event: output is held (a package's result line printed),
// a pass or skip counts and drops it, a fail counts and prints it.
func (s *summary) add(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output":
		b := s.output[key]
		if b == nil {
			b = &strings.Builder{}
			s.output[key] = b
		}
		b.WriteString(e.Output)
		if e.Test == "" && packageResult(e.Output) {
			fmt.Print(e.Output)
		}
	case "pass":
		if e.Test != "" {
			s.passed++
		}
		delete(s.output, key)
	case "skip":
		if e.Test != "" {
			s.skipped++
		}
		delete(s.output, key)
	case "fail":
		s.fail(e, key)
	}
}

// fail counts a failed test and prints its output, or marks a package
// failed and prints what it said outside its tests.
func (s *summary) fail(e event, key string) {
	if e.Test != "" {
		s.failed++
		s.failedTests = append(s.failedTests, key)
		fmt.Printf("--- FAIL: %s (%s, %.1fs)\n", e.Test, e.Package, e.Elapsed)
		if b := s.output[key]; b != nil {
			fmt.Print(indent(b.String()))
		}
		return
	}
	s.pkgFailed = true
	if b := s.output[key]; b != nil && !strings.Contains(b.String(), "--- FAIL") {
		fmt.Print(indent(b.String()))
	}
}

// packageResult says whether a package's output line is its result (ok,
// FAIL, no test files, a panic, a failed setup or build), printed as it
// comes.
func packageResult(out string) bool {
	return strings.HasPrefix(out, "ok") || strings.HasPrefix(out, "FAIL") ||
		strings.HasPrefix(out, "?") || strings.HasPrefix(out, "panic") ||
		strings.Contains(out, "[setup failed]") || strings.Contains(out, "[build failed]")
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
