package lease_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOutsideModule builds and runs testdata/rebootd the way another tool's
// repository would: a module of its own whose go.mod requires
// lull.dev/lull/lease and replaces only that module (with this folder, as it
// is not published), resolving everything else through the machine's module
// proxy. An import that dragged in k8s.io/kubernetes would fail here: its
// staging modules resolve only with replace lines that do not carry over to
// importers.
func TestOutsideModule(t *testing.T) {
	leaseDir, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	goMod := "module example.com/rebootd\n\ngo 1.26.0\n\n" +
		"require lull.dev/lull/lease v0.0.0\n\n" +
		"replace lull.dev/lull/lease => " + leaseDir + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	src, err := os.ReadFile(filepath.Join("testdata", "rebootd", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))

	g := newGoCmd(t, dir)
	g.run("mod", "tidy")
	g.run("build", "-o", "rebootd", ".")

	out, err := exec.CommandContext(t.Context(), filepath.Join(dir, "rebootd")).CombinedOutput()
	require.NoError(t, err, "running rebootd:\n%s", out)
	want := `acquired lull-leases/node-n1 by rebootd/host-a (family rebootd) for 2m0s, token 0
upgrader waits: node n1 is leased by "rebootd/host-a" for reboot (kernel 6.12) since 2026-11-22T10:00:00Z
renewed at 2026-11-22T10:01:00Z
released
upgrader acquired lull-leases/node-n1
`
	require.Equal(t, want, string(out))

	requireOnlyLeaseReplaced(t, g, leaseDir)
	deps := strings.Fields(g.run("list", "-deps", "."))
	require.Contains(t, deps, "lull.dev/lull/lease")
	require.Contains(t, deps, "k8s.io/client-go/kubernetes")
	for _, p := range deps {
		require.False(t, p == "k8s.io/kubernetes" || strings.HasPrefix(p, "k8s.io/kubernetes/"),
			"the outside program links %s", p)
	}
	for _, m := range strings.Fields(g.run("list", "-m", "-f", "{{.Path}}", "all")) {
		require.NotEqual(t, "k8s.io/kubernetes", m, "k8s.io/kubernetes is in the outside module's graph")
	}
}

// requireOnlyLeaseReplaced checks the go.mod go mod tidy left: its one
// replace line is the lease module's.
func requireOnlyLeaseReplaced(t *testing.T, g *goCmd, leaseDir string) {
	t.Helper()
	var mod struct {
		Replace []struct {
			Old struct{ Path string }
			New struct{ Path, Version string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(g.run("mod", "edit", "-json")), &mod))
	require.Len(t, mod.Replace, 1, "replace lines: %+v", mod.Replace)
	require.Equal(t, "lull.dev/lull/lease", mod.Replace[0].Old.Path)
	require.Equal(t, leaseDir, mod.Replace[0].New.Path)
}

// goCmd runs the go command in the outside module with the machine's module
// proxy, no workspace and -mod=mod, as a fresh checkout of another tool
// would.
type goCmd struct {
	t   *testing.T
	dir string
	env []string
}

func newGoCmd(t *testing.T, dir string) *goCmd {
	t.Helper()
	proxy, err := exec.CommandContext(t.Context(), "go", "env", "GOPROXY").Output()
	require.NoError(t, err, "go env GOPROXY (the go command must be on PATH)")
	t.Logf("GOPROXY=%s", strings.TrimSpace(string(proxy)))
	env := append(os.Environ(), "GOPROXY="+strings.TrimSpace(string(proxy)),
		"GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	return &goCmd{t: t, dir: dir, env: env}
}

func (g *goCmd) run(args ...string) string {
	g.t.Helper()
	cmd := exec.CommandContext(g.t.Context(), "go", args...)
	cmd.Dir, cmd.Env = g.dir, g.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	require.NoError(g.t, err, "go %s in %s:\n%s", strings.Join(args, " "), g.dir, stderr.String())
	// Cold (empty caches) this test costs minutes, warm seconds: say where.
	g.t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return string(out)
}
