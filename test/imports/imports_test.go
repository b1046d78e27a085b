// Package imports checks lull's folders: import arrows point down (cmd/ →
// the components plugins/, drainer/, agent/, cli/ → internal/ → api/), no
// component imports another, and no import of lull's own packages needs an
// alias. A package that breaks one fails `make verify`.
package imports

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "lull.dev/lull/"

// layer of a lull package: 0 api, 1 internal (and nested library modules
// such as lease/), 2 components, 3 cmd; -1 for packages outside lull.
func layer(path string) int {
	if !strings.HasPrefix(path, module) {
		return -1
	}
	switch top, _, _ := strings.Cut(strings.TrimPrefix(path, module), "/"); top {
	case "api":
		return 0
	case "drainer", "plugins", "agent", "cli":
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
				out = append(out, fmt.Sprintf("%s imports %s: an arrow points up (cmd → plugins/, drainer/, agent/, cli/ → internal/ → api/)", pkg, imp))
			case from == 2 && to == 2 && component(pkg) != component(imp):
				out = append(out, fmt.Sprintf("%s imports %s: one component imports another", pkg, imp))
			}
		}
	}
	sort.Strings(out)
	return out
}

// forbiddenDeps lists the packages kubectl-lull must not link: the
// scheduler framework and lull's other components.
func forbiddenDeps(deps []string) []string {
	var out []string
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/kubernetes/pkg/scheduler") || layer(d) == 2 && component(d) != "cli" {
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
		module + "internal/plan":          {module + "drainer/maintenance", module + "internal/gate", "k8s.io/api/core/v1"},
		module + "api/v1alpha1":           {module + "internal/window"},
		module + "internal/gate":          {module + "cmd/kubectl-lull"},
		module + "drainer/maintenance":    {module + "plugins/nodedisruption", module + "internal/gate"},
		module + "plugins/nodedisruption": {module + "plugins/nodedisruption/apis/config"},
		module + "test/integration":       {module + "drainer/app"},
	})
	want := []string{
		module + "api/v1alpha1 imports " + module + "internal/window: api/ imports nothing else of lull's",
		module + "drainer/maintenance imports " + module + "plugins/nodedisruption: one component imports another",
		module + "internal/gate imports " + module + "cmd/kubectl-lull: an arrow points up (cmd → plugins/, drainer/, agent/, cli/ → internal/ → api/)",
		module + "internal/plan imports " + module + "drainer/maintenance: an arrow points up (cmd → plugins/, drainer/, agent/, cli/ → internal/ → api/)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	bad := forbiddenDeps([]string{"k8s.io/kubernetes/pkg/scheduler/framework", module + "cli", module + "drainer/maintenance", "k8s.io/client-go/rest"})
	if strings.Join(bad, ",") != "k8s.io/kubernetes/pkg/scheduler/framework,"+module+"drainer/maintenance" {
		t.Errorf("forbidden deps: %v", bad)
	}
}

// aliasNeeded says why importing lull's package path under alias is not
// allowed, or "" when it is: no alias (""), the blank and dot imports, an
// alias that is the package's own name, and an API version package's group
// prefix (lullv1alpha1 for api/v1alpha1, as Kubernetes' corev1). Any other
// alias means two of lull's packages share a name, or a package's name
// does not say what it is: rename the package instead.
func aliasNeeded(importPath, alias string) string {
	if !strings.HasPrefix(importPath, module) {
		return ""
	}
	last := path.Base(importPath)
	switch alias {
	case "", "_", ".", last:
		return ""
	}
	if strings.HasPrefix(importPath, module+"api/") && alias == "lull"+last {
		return ""
	}
	return fmt.Sprintf("%s imported as %s: lull's packages are imported under their own names", importPath, alias)
}

// aliases lists the imports of lull's packages under an alias in the Go
// files below root (skipping _output and .git).
func aliases(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "_output" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			alias := ""
			if imp.Name != nil {
				alias = imp.Name.Name
			}
			if why := aliasNeeded(ip, alias); why != "" {
				rel, _ := filepath.Rel(root, p)
				out = append(out, rel+": "+why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNoAliasesForLullsPackages(t *testing.T) {
	for _, a := range aliases(t, "../..") {
		t.Error(a)
	}
}

// The alias check itself refuses what it should.
func TestAliasNeeded(t *testing.T) {
	for _, c := range []struct {
		path, alias string
		refused     bool
	}{
		{path: module + "internal/window"},
		{path: module + "internal/window", alias: "window"},
		{path: module + "internal/window", alias: "engine", refused: true},
		{path: module + "drainer/windowcontroller", alias: "windowctrl", refused: true},
		{path: module + "api/v1alpha1", alias: "lullv1alpha1"},
		{path: module + "internal/lullscheme", alias: "_"},
		{path: module + "internal/version", alias: "lullversion", refused: true},
		{path: "k8s.io/api/core/v1", alias: "corev1"},
	} {
		if got := aliasNeeded(c.path, c.alias) != ""; got != c.refused {
			t.Errorf("aliasNeeded(%s, %q) refused = %v, want %v", c.path, c.alias, got, c.refused)
		}
	}
}
