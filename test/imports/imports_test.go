// Package imports checks that lull's import arrows point down: cmd/ →
// the components (drainer/, plugins/) → pkg/ → api/. A package that
// reaches back up fails `make verify`.
package imports

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "lull.dev/lull/"

// layer of a lull package: 0 api, 1 pkg (and nested library modules such
// as lease/), 2 components, 3 cmd; -1 for packages outside lull.
func layer(path string) int {
	if !strings.HasPrefix(path, module) {
		return -1
	}
	switch top, _, _ := strings.Cut(strings.TrimPrefix(path, module), "/"); top {
	case "api":
		return 0
	case "drainer", "plugins", "agent":
		return 2
	case "cmd":
		return 3
	case "test", "hack":
		return 4 // tests and tools may import anything
	}
	return 1
}

func component(path string) string {
	top, _, _ := strings.Cut(strings.TrimPrefix(path, module), "/")
	return top
}

// violations lists the imports in graph (package → its imports) that
// point up or sideways between components.
func violations(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		from := layer(pkg)
		for _, imp := range imports {
			to := layer(imp)
			switch {
			case from < 0 || to < 0 || from == 4:
			case from == 0 && to != 0:
				out = append(out, fmt.Sprintf("%s imports %s: api/ imports nothing else of lull's", pkg, imp))
			case to > from:
				out = append(out, fmt.Sprintf("%s imports %s: an arrow points up (cmd → drainer/, plugins/ → pkg/ → api/)", pkg, imp))
			case from == 2 && to == 2 && component(pkg) != component(imp):
				out = append(out, fmt.Sprintf("%s imports %s: one component imports another", pkg, imp))
			}
		}
	}
	sort.Strings(out)
	return out
}

// forbiddenDeps lists the packages kubectl-lull must not link: the
// scheduler framework and lull's components.
func forbiddenDeps(deps []string) []string {
	var out []string
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/kubernetes/pkg/scheduler") || layer(d) == 2 {
			out = append(out, d)
		}
	}
	return out
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func TestImportsPointDown(t *testing.T) {
	graph := map[string][]string{}
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		fields := strings.Fields(line)
		graph[fields[0]] = fields[1:]
	}
	if len(graph) < 10 {
		t.Fatalf("go list found only %d packages", len(graph))
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
}

func TestKubectlLullLinksNoComponent(t *testing.T) {
	deps := goList(t, "-deps", "./cmd/kubectl-lull")
	for _, d := range forbiddenDeps(deps) {
		t.Errorf("kubectl-lull links %s", d)
	}
}

// The check itself fails on a bad arrow (so the tests above can fail).
func TestViolationsFound(t *testing.T) {
	got := violations(map[string][]string{
		module + "pkg/plan":               {module + "drainer/maintenance", module + "pkg/gate", "k8s.io/api/core/v1"},
		module + "api/v1alpha1":           {module + "pkg/window"},
		module + "pkg/gate":               {module + "cmd/kubectl-lull"},
		module + "drainer/maintenance":    {module + "plugins/nodedisruption", module + "pkg/gate"},
		module + "plugins/nodedisruption": {module + "plugins/nodedisruption/apis/config"},
		module + "test/integration":       {module + "drainer/app"},
	})
	want := []string{
		module + "api/v1alpha1 imports " + module + "pkg/window: api/ imports nothing else of lull's",
		module + "drainer/maintenance imports " + module + "plugins/nodedisruption: one component imports another",
		module + "pkg/gate imports " + module + "cmd/kubectl-lull: an arrow points up (cmd → drainer/, plugins/ → pkg/ → api/)",
		module + "pkg/plan imports " + module + "drainer/maintenance: an arrow points up (cmd → drainer/, plugins/ → pkg/ → api/)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	bad := forbiddenDeps([]string{"k8s.io/kubernetes/pkg/scheduler/framework", module + "pkg/cli", module + "drainer/maintenance", "k8s.io/client-go/rest"})
	if strings.Join(bad, ",") != "k8s.io/kubernetes/pkg/scheduler/framework,"+module+"drainer/maintenance" {
		t.Errorf("forbidden deps: %v", bad)
	}
}
