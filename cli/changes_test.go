package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
	"lull.dev/lull/internal/policy"
)

// shippedPolicy is the policy lull ships (internal/policy/default.yaml).
func shippedPolicy(t *testing.T) *lullv1alpha1.DisruptionPolicy {
	t.Helper()
	p, err := policy.Shipped()
	require.NoError(t, err)
	return p
}

// configTree writes files (path → content) under a new directory standing
// for a node's /.
func configTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return root
}

// Planning from two configurations: every change decided by the first
// rule that matches it, shown once, and the plan per node.
func TestPlanFromChange(t *testing.T) {
	old := configTree(t, map[string]string{"etc/chrony.conf": "pool a\n", "etc/hostname": "n1\n"})
	next := configTree(t, map[string]string{"etc/chrony.conf": "pool b\n", "etc/hostname": "n1\n",
		"etc/containerd/certs.d/registry.example/hosts.toml": "server = \"https://mirror\"\n"})
	ch := changeFlags{from: old, to: next}
	require.NoError(t, ch.load())
	require.Equal(t, []string{"/etc/chrony.conf", "/etc/containerd/certs.d/registry.example/hosts.toml"}, ch.changes.Files)
	req, err := buildRequest([]string{"n1"}, "", nil, ch.changes, "", nil)
	require.NoError(t, err)
	c, cl := stepsCluster(t, shippedPolicy(t))
	res, err := cl.Preview(t.Context(), c, fake.NewClientset(webPod()), req)
	require.NoError(t, err)
	n := res.Nodes[0]
	require.Equal(t, "RestartService", string(n.Action))
	require.Len(t, n.Changes, 2)
	require.Equal(t, "default/chrony-files", n.Changes[0].RuleRef())
	require.Equal(t, "default/registry-hosts", n.Changes[1].RuleRef())
	var buf bytes.Buffer
	require.NoError(t, renderPlan(&buf, res, false, humanOptions{}))
	golden(t, "plan-from-change", buf.Bytes())

	// A kernel argument on top: the reboot wins.
	next2 := configTree(t, map[string]string{"etc/chrony.conf": "pool b\n", "etc/hostname": "n1\n", "etc/kernel/cmdline": "quiet hugepages=16\n"})
	old2 := configTree(t, map[string]string{"etc/chrony.conf": "pool a\n", "etc/hostname": "n1\n", "etc/kernel/cmdline": "quiet\n"})
	ch = changeFlags{from: old2, to: next2}
	require.NoError(t, ch.load())
	req, err = buildRequest([]string{"n1"}, "", nil, ch.changes, "", nil)
	require.NoError(t, err)
	res, err = cl.Preview(t.Context(), c, fake.NewClientset(webPod()), req)
	require.NoError(t, err)
	require.Equal(t, "Reboot", string(res.Nodes[0].Action))
	require.Equal(t, []string{"RestartService chronyd (file /etc/chrony.conf)"}, res.Nodes[0].Steps[len(res.Nodes[0].Steps)-1].Covers)
}

// What cannot be compared is an error naming the file; nothing is
// planned from it (never None).
func TestPlanFromChangeErrors(t *testing.T) {
	dir := configTree(t, map[string]string{"etc/a": "a"})
	bad := filepath.Join(t.TempDir(), "bad.ign")
	require.NoError(t, os.WriteFile(bad, []byte(`{"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "relative"}]}}`), 0o644))
	for _, tc := range []struct {
		name string
		ch   changeFlags
		want string
	}{
		{"only --from", changeFlags{from: dir}, "give both --from"},
		{"missing", changeFlags{from: dir, to: filepath.Join(dir, "nope")}, "--to: "},
		{"invalid Ignition", changeFlags{from: dir, to: bad}, "bad.ign"},
		{"identical", changeFlags{from: dir, to: dir}, "are the same configuration: nothing changes"},
		{"--write alone", changeFlags{write: true}, "--write needs --from and --to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ch.load()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// --write refuses what lull-agent cannot write.
	old := configTree(t, map[string]string{"etc/kernel/cmdline": "quiet\n", "etc/a": "a"})
	next := configTree(t, map[string]string{"etc/kernel/cmdline": "quiet nosmt\n", "etc/a": "b"})
	ch := changeFlags{from: old, to: next, write: true}
	err := ch.load()
	require.Error(t, err)
	require.Contains(t, err.Error(), "kernelArgument nosmt")
}

// request --write files the change with a NodeConfig holding the new
// files, named by content: requested again, the same one is reused.
func TestRequestWritesNodeConfig(t *testing.T) {
	old := configTree(t, map[string]string{"etc/chrony.conf": "pool a\n"})
	next := configTree(t, map[string]string{"etc/chrony.conf": "pool b\n", "etc/chrony.d/extra.conf": "server c\n"})
	ch := changeFlags{from: old, to: next, write: true}
	require.NoError(t, ch.load())
	req, err := buildRequest([]string{"n1"}, "", nil, ch.changes, "", nil)
	require.NoError(t, err)
	c, cl := stepsCluster(t, shippedPolicy(t))
	res, err := cl.Preview(t.Context(), c, fake.NewClientset(webPod()), req)
	require.NoError(t, err)
	require.Equal(t, "WriteFiles, RestartService chronyd", stepsOf(res.Nodes[0].Steps))
	var out bytes.Buffer
	o := testOptions()
	o.out, o.errOut = &out, &out
	require.NoError(t, o.requestAll(t.Context(), c, cl, res, req, "new NTP servers", false, &ch))
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, ch.changes.Config, nm.Spec.Changes.Config)
	var nc lullv1alpha1.NodeConfig
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: lullv1alpha1.ConfigNamespace, Name: nm.Spec.Changes.Config}, &nc))
	require.Len(t, nc.Spec.Files, 2)
	require.Equal(t, "/etc/chrony.conf", nc.Spec.Files[0].Path)
	require.Equal(t, hostfiles.SHA256([]byte("pool a\n")), nc.Spec.Files[0].Previous)
	require.Equal(t, "pool b\n", string(nc.Spec.Files[0].Contents))
	require.Empty(t, nc.Spec.Files[1].Previous, "a new file must not exist before")
	require.Contains(t, out.String(), "nodeconfig/"+nc.Name+" created: 2 files to write")
	out.Reset()
	require.NoError(t, ch.ensureConfig(t.Context(), c, &out))
	require.Contains(t, out.String(), "unchanged")
}

func stepsOf(steps []lullv1alpha1.PlannedStep) string {
	var b bytes.Buffer
	for i, st := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(lullv1alpha1.StepLabel(st.Type, st.Unit))
	}
	return b.String()
}
