// Package e2e runs lull's end-to-end tests against a local cluster brought
// up by hack/local-up.sh: real etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok-simulated nodes.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"lull.dev/lull/test/framework"
)

// Cluster is a local cluster started for a test run.
type Cluster struct {
	Dir        string
	Kubeconfig string
	Config     *rest.Config
	Clientset  kubernetes.Interface
	// DrainerMetricsPort is lull-drainer's metrics port on 127.0.0.1.
	DrainerMetricsPort int
	env                []string
}

// UpCluster runs hack/local-up.sh in its own directory and port range so it
// does not collide with a cluster a developer has running. By default the
// cluster has simulated nodes only and lull runs as host processes (the
// development mode), and never with real-node-1, the machine booted by
// systemd (a boot costs CI time; LULL_REAL_NODE_1=1 asks for it); env
// (KEY=VALUE, e.g. LULL_REAL_NODE=1) overrides that and anything else
// local-up.sh reads.
func UpCluster(nodes int, env ...string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "lull-e2e-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	base := os.Getenv("LULL_E2E_PORT_BASE")
	if base == "" {
		base = "27000"
	}
	// No sample windows: the tests create the windows they need.
	c.env = append(os.Environ(), "LULL_CLUSTER_DIR="+dir, "LULL_PORT_BASE="+base, "LULL_SAMPLES=0", "LULL_REAL_NODE=0", "LULL_REAL_NODE_1=0")
	c.env = append(c.env, env...)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LULL_PORT_BASE="); ok {
			base = v
		}
	}
	if b, err := strconv.Atoi(base); err == nil {
		c.DrainerMetricsPort = b + 80 // hack/lib/cluster.sh: DRAINER_METRICS_PORT
	}
	// The tests run lull's own binaries as built from this tree.
	build := exec.Command("go", "build", "-o", framework.BinDir()+"/", "./cmd/...")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building lull's commands: %w\n%s", err, out)
	}
	up := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "local-up.sh"), "--nodes", fmt.Sprint(nodes))
	up.Env = c.env
	out, err := up.CombinedOutput()
	if err != nil {
		_ = c.Down()
		return nil, fmt.Errorf("hack/local-up.sh failed: %w\n%s", err, out)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		_ = c.Down()
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	c.Clientset, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		_ = c.Down()
		return nil, err
	}
	return c, nil
}

// Down stops the cluster and removes its directory.
func (c *Cluster) Down() error {
	down := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "local-down.sh"))
	down.Env = c.env
	out, err := down.CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/local-down.sh: %w\n%s", err, out)
	}
	return os.RemoveAll(c.Dir)
}

// Kubectl runs the pinned kubectl against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// LogsHint says where component logs are, for failure messages.
func (c *Cluster) LogsHint() string {
	return "component logs: " + filepath.Join(c.Dir, "logs")
}

// RealNodeMain runs a package's tests (m) on a cluster of its own with lull
// installed as pods on the real node: UpCluster(nodes) with LULL_REAL_NODE=1,
// the port base from the environment variable portEnv (base if unset), the
// images tagged with this checkout's `git describe`, and env. setup gets
// the cluster and that version before the tests run. The cluster goes
// down afterwards; a failure's message says where the component logs were.
// It returns the exit code.
func RealNodeMain(m *testing.M, name string, nodes int, portEnv, base string, env []string, setup func(c *Cluster, version string) error) int {
	ctrllog.SetLogger(klog.Background())
	if v := os.Getenv(portEnv); v != "" {
		base = v
	}
	out, err := exec.Command("git", "-C", framework.RepoRoot(), "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: git describe: %v\n", name, err)
		return 1
	}
	version := strings.TrimSpace(string(out))
	cl, err := UpCluster(nodes, append([]string{"LULL_REAL_NODE=1", "LULL_PORT_BASE=" + base, "LULL_VERSION=" + version}, env...)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	code := 1
	if err := setup(cl, version); err == nil {
		code = m.Run()
	} else {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s: failed; %s (removed on exit)\n", name, cl.LogsHint())
	}
	if err := cl.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		code = 1
	}
	return code
}
