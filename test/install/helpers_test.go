package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"lull.dev/lull/test/framework"
)

// bin returns the path of a pinned binary, failing the test when it has
// not been built.
func bin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(framework.BinDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found in %s: run 'hack/build-binaries.sh kubectl helm krew kube-apiserver etcd' first", name, framework.BinDir())
	}
	return p
}

// run runs a command and returns its standard output; it fails the test
// with the command's standard error when it fails.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(env, name, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// runErr runs a command; its error names the command and holds stderr.
func runErr(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// object is one decoded Kubernetes object.
type object = map[string]any

// objects decodes a multi-document YAML stream into objects keyed by
// apiVersion/kind/namespace/name; two objects with one key fail the test.
func objects(t *testing.T, what, stream string) map[string]object {
	t.Helper()
	out := map[string]object{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: reading YAML: %v", what, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		var o object
		if err := json.Unmarshal(j, &o); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(o) == 0 {
			continue // an empty document (comments only)
		}
		k := key(o)
		if _, dup := out[k]; dup {
			t.Fatalf("%s: two objects %s", what, k)
		}
		out[k] = o
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", what)
	}
	return out
}

func key(o object) string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v/%v/%v/%v", o["apiVersion"], o["kind"], md["namespace"], md["name"])
}

// keys lists a map's keys, sorted.
func keys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// get walks an object along a path of map keys and slice indexes.
func get(t *testing.T, o any, path ...any) any {
	t.Helper()
	cur := o
	for i, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %v", path, path[:i])
			}
			cur = m[p]
		case int:
			s, ok := cur.([]any)
			if !ok || p >= len(s) {
				t.Fatalf("%v: no item %d at %v", path, p, path[:i])
			}
			cur = s[p]
		}
	}
	return cur
}

// TestMain keeps helm's and krew's state out of the user's home.
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "lull-install-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{
		"HELM_CACHE_HOME":  filepath.Join(tmp, "helm", "cache"),
		"HELM_CONFIG_HOME": filepath.Join(tmp, "helm", "config"),
		"HELM_DATA_HOME":   filepath.Join(tmp, "helm", "data"),
	} {
		_ = os.Setenv(k, v)
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// waitEstablished waits until the CRDs are Established. kubectl wait
// fails at once, instead of waiting, on a CRD whose status has no
// conditions yet ("accessor error: <nil> is of the type <nil>"), as a
// CRD just created on a loaded API server can be (CI,
// TestGuardNodeConditionsRedTeam): it is asked again until a minute has
// passed.
func waitEstablished(t *testing.T, kubectl func(args ...string) (string, error), crds ...string) {
	t.Helper()
	args := append([]string{"wait", "--for=condition=Established", "--timeout=20s"}, crds...)
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := kubectl(args...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %v to be Established: %v\n%s", crds, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
