package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
	"lull.dev/lull/internal/lullscheme"
)

var writeStart = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

// writeCase is a request whose decision writes NodeConfig "c1" (files
// /etc/chrony.conf and the unit tour.service), the NodeConfig, and a host
// root holding the old chrony.conf.
func writeCase(t *testing.T, mutate func(nm *lullv1alpha1.NodeMaintenance, nc *lullv1alpha1.NodeConfig, cm *corev1.ConfigMap)) (*Files, *lullv1alpha1.NodeMaintenance, string) {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/chrony.conf"), []byte("pool a\n"), 0o644))
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: lullv1alpha1.NodeMaintenanceStatus{
		StartedAt: &metav1.Time{Time: writeStart},
		Decision: &lullv1alpha1.Decision{Config: "c1", Changes: []lullv1alpha1.ChangeDecision{
			{Kind: lullv1alpha1.ChangeFile, Name: "/etc/chrony.conf"}, {Kind: lullv1alpha1.ChangeUnit, Name: "tour.service"}}}}}
	nc := &lullv1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: lullv1alpha1.ConfigNamespace, Generation: 1, UID: "c1-uid-1",
		CreationTimestamp: metav1.Time{Time: writeStart.Add(-time.Minute)}},
		Spec: lullv1alpha1.NodeConfigSpec{Files: []lullv1alpha1.ConfigFile{
			{Path: "/etc/chrony.conf", Previous: hostfiles.SHA256([]byte("pool a\n")), Contents: []byte("pool b\n")},
			{Path: "/etc/systemd/system/tour.service.d/10-lull.conf", Contents: []byte("[Service]\nEnvironment=X=1\n")},
		}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lull-admission", Namespace: "lull-system"},
		Data: map[string]string{"writablePaths": "/etc/**", "protectedPaths": "/etc/kubernetes/**, /etc/shadow"}}
	if mutate != nil {
		mutate(nm, nc, cm)
	}
	// The drainer recorded the NodeConfig when the request started.
	nm.Status.Decision.ConfigUID, nm.Status.Decision.ConfigSHA256 = nc.UID, hostfiles.ConfigSHA256(nc.Spec.Files)
	objs := []client.Object{nc, cm}
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	return &Files{Live: c, HostRoot: root, ConfigNamespace: lullv1alpha1.ConfigNamespace,
		Admission: types.NamespacedName{Namespace: "lull-system", Name: "lull-admission"}}, nm, root
}

func TestWriteFiles(t *testing.T) {
	f, nm, root := writeCase(t, nil)
	msg, err := f.Write(t.Context(), nm)
	require.NoError(t, err)
	require.Contains(t, msg, "2 files written and verified")
	b, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
	require.NoError(t, err)
	require.Equal(t, "pool b\n", string(b))
	_, err = os.Stat(filepath.Join(root, "etc/systemd/system/tour.service.d/10-lull.conf"))
	require.NoError(t, err)
	// Done again (an agent that restarted after writing): nothing to do.
	_, err = f.Write(t.Context(), nm)
	require.NoError(t, err)
}

// Everything the agent refuses leaves the node's files as they were.
func TestWriteFilesRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(nm *lullv1alpha1.NodeMaintenance, nc *lullv1alpha1.NodeConfig, cm *corev1.ConfigMap)
		drift  bool
		want   string
	}{
		{name: "drift", drift: true, want: "drift: "},
		{name: "a file the plan did not decide", mutate: func(_ *lullv1alpha1.NodeMaintenance, nc *lullv1alpha1.NodeConfig, _ *corev1.ConfigMap) {
			nc.Spec.Files = append(nc.Spec.Files, lullv1alpha1.ConfigFile{Path: "/etc/sudoers.d/x", Contents: []byte("ALL")})
		}, want: "names /etc/sudoers.d/x, which the request's changes do not list"},
		{name: "a drop-in of another unit", mutate: func(_ *lullv1alpha1.NodeMaintenance, nc *lullv1alpha1.NodeConfig, _ *corev1.ConfigMap) {
			nc.Spec.Files[1].Path = "/etc/systemd/system/kubelet.service.d/10-lull.conf"
		}, want: "names /etc/systemd/system/kubelet.service.d/10-lull.conf"},
		{name: "changed since created", mutate: func(_ *lullv1alpha1.NodeMaintenance, nc *lullv1alpha1.NodeConfig, _ *corev1.ConfigMap) {
			nc.Generation = 2
		}, want: "was changed after it was created (generation 2)"},
		{name: "missing", mutate: func(nm *lullv1alpha1.NodeMaintenance, _ *lullv1alpha1.NodeConfig, _ *corev1.ConfigMap) {
			nm.Status.Decision.Config = "gone"
		}, want: "NodeConfig lull-configs/gone not found"},
		{name: "no allowlist", mutate: func(_ *lullv1alpha1.NodeMaintenance, _ *lullv1alpha1.NodeConfig, cm *corev1.ConfigMap) {
			cm.Name = "other"
		}, want: "reading the writable and protected paths"},
		{name: "off the allowlist", mutate: func(_ *lullv1alpha1.NodeMaintenance, _ *lullv1alpha1.NodeConfig, cm *corev1.ConfigMap) {
			cm.Data["writablePaths"] = "/etc/chrony/**"
		}, want: "/etc/chrony.conf"},
		{name: "protected", mutate: func(_ *lullv1alpha1.NodeMaintenance, _ *lullv1alpha1.NodeConfig, cm *corev1.ConfigMap) {
			cm.Data["protectedPaths"] = "/etc/chrony.conf"
		}, want: "/etc/chrony.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, nm, root := writeCase(t, tc.mutate)
			if tc.drift {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/chrony.conf"), []byte("pool edited-by-hand\n"), 0o644))
			}
			before, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
			require.NoError(t, err)
			_, err = f.Write(t.Context(), nm)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			if tc.drift {
				require.Contains(t, err.Error(), hostfiles.SHA256([]byte("pool a\n")), "the hash it wanted")
				require.Contains(t, err.Error(), hostfiles.SHA256(before), "the hash it found")
			}
			after, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
			require.NoError(t, err)
			require.Equal(t, string(before), string(after), "nothing written")
			_, err = os.Stat(filepath.Join(root, "etc/systemd/system"))
			require.True(t, os.IsNotExist(err), "no directory made")
		})
	}
}

// remake deletes the request's NodeConfig and creates it again under the
// same name, generation 1 (as the API server does for a new object), with
// the given UID and files.
func remake(t *testing.T, f *Files, uid types.UID, files []lullv1alpha1.ConfigFile) {
	t.Helper()
	c := f.Live.(client.Client)
	var nc lullv1alpha1.NodeConfig
	require.NoError(t, c.Get(t.Context(), types.NamespacedName{Namespace: lullv1alpha1.ConfigNamespace, Name: "c1"}, &nc))
	require.NoError(t, c.Delete(t.Context(), &nc))
	again := &lullv1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: lullv1alpha1.ConfigNamespace, Generation: 1, UID: uid},
		Spec: lullv1alpha1.NodeConfigSpec{Files: files}}
	require.NoError(t, c.Create(t.Context(), again))
	require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(again), &nc))
	require.Equal(t, uid, nc.UID)
	require.Equal(t, int64(1), nc.Generation)
}

// A NodeConfig deleted and created again under the same name since the
// request started is not the one it was planned from, whatever it holds:
// same name and generation, another UID or other files, and the step
// fails as drift with nothing written.
func TestWriteFilesRefusesANodeConfigMadeAgain(t *testing.T) {
	f0, _, _ := writeCase(t, nil)
	var planned lullv1alpha1.NodeConfig
	require.NoError(t, f0.Live.Get(t.Context(), types.NamespacedName{Namespace: lullv1alpha1.ConfigNamespace, Name: "c1"}, &planned))
	evil := []lullv1alpha1.ConfigFile{
		{Path: "/etc/chrony.conf", Previous: hostfiles.SHA256([]byte("pool a\n")), Contents: []byte("pool evil.example\n")},
		planned.Spec.Files[1],
	}
	for _, tc := range []struct {
		name  string
		uid   types.UID
		files []lullv1alpha1.ConfigFile
		want  []string
	}{{
		name: "other content", uid: "c1-uid-2", files: evil,
		want: []string{"UID c1-uid-2, not c1-uid-1", "files sha256 " + hostfiles.ConfigSHA256(evil) + ", not " + hostfiles.ConfigSHA256(planned.Spec.Files)},
	}, {
		name: "the same content", uid: "c1-uid-2", files: planned.Spec.Files,
		want: []string{"UID c1-uid-2, not c1-uid-1"},
	}, {
		name: "other content, the same UID", uid: "c1-uid-1", files: evil,
		want: []string{"files sha256 " + hostfiles.ConfigSHA256(evil) + ", not " + hostfiles.ConfigSHA256(planned.Spec.Files)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, nm, root := writeCase(t, nil)
			remake(t, f, tc.uid, tc.files)
			_, err := f.Write(t.Context(), nm)
			require.Error(t, err)
			require.Contains(t, err.Error(), "drift: NodeConfig lull-configs/c1 is not the one the request was planned from")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.Contains(t, err.Error(), "nothing written")
			b, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
			require.NoError(t, err)
			require.Equal(t, "pool a\n", string(b), "nothing written")
			_, err = os.Stat(filepath.Join(root, "etc/systemd/system"))
			require.True(t, os.IsNotExist(err), "no directory made")
		})
	}
}

// A request started by a drainer that recorded no UID or hash keeps
// working as before: its NodeConfig is known by name (and generation 1)
// alone, so one made again under its name is written.
func TestWriteFilesWithoutRecordedIdentity(t *testing.T) {
	f, nm, root := writeCase(t, nil)
	nm.Status.Decision.ConfigUID, nm.Status.Decision.ConfigSHA256 = "", ""
	var planned lullv1alpha1.NodeConfig
	require.NoError(t, f.Live.Get(t.Context(), types.NamespacedName{Namespace: lullv1alpha1.ConfigNamespace, Name: "c1"}, &planned))
	remake(t, f, "c1-uid-2", planned.Spec.Files)
	msg, err := f.Write(t.Context(), nm)
	require.NoError(t, err)
	require.Contains(t, msg, "2 files written and verified")
	b, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
	require.NoError(t, err)
	require.Equal(t, "pool b\n", string(b))
}

// Issue 41, finding 2: an agent died between two renames of a WriteFiles
// (its journal says "writing", chrony.conf already new, the drop-in
// written). The next agent puts both back before it does anything else,
// and the journal says so.
func TestRecoverUnfinishedWriteFilesAtStart(t *testing.T) {
	f, _, root := writeCase(t, nil)
	journal := filepath.Join(root, hostfiles.DefaultJournal)
	require.NoError(t, os.MkdirAll(journal, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/chrony.conf"), []byte("pool b\n"), 0o644))
	dropin := filepath.Join(root, "etc/systemd/system/tour.service.d/10-lull.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(dropin), 0o755))
	require.NoError(t, os.WriteFile(dropin, []byte("[Service]\nEnvironment=X=1\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(journal, "old-0"), []byte("pool a\n"), 0o600))
	rec := hostfiles.JournalRecord{ID: "died", State: hostfiles.JournalWriting,
		Dirs: []string{"etc/systemd", "etc/systemd/system", "etc/systemd/system/tour.service.d"},
		Files: []hostfiles.JournalFile{
			{Path: "/etc/chrony.conf", Old: "old-0", OldSHA256: hostfiles.SHA256([]byte("pool a\n")), OldMode: 0o644,
				OldUID: os.Getuid(), OldGID: os.Getgid(), SHA256: hostfiles.SHA256([]byte("pool b\n")),
				Tmp: ".chrony.conf.lull-tmp-1", RestoreTmp: ".chrony.conf.lull-tmp-2"},
			{Path: "/etc/systemd/system/tour.service.d/10-lull.conf", New: true, SHA256: hostfiles.SHA256([]byte("[Service]\nEnvironment=X=1\n")),
				Tmp: ".10-lull.conf.lull-tmp-3"},
		}}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(journal, "set.json"), b, 0o600))

	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).Build()
	a := &Agent{Client: c, Live: c, Node: "n1", Files: f}
	_, err = a.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
	require.NoError(t, err)

	content, err := os.ReadFile(filepath.Join(root, "etc/chrony.conf"))
	require.NoError(t, err)
	require.Equal(t, "pool a\n", string(content))
	_, err = os.Stat(filepath.Join(root, "etc/systemd"))
	require.ErrorIs(t, err, os.ErrNotExist, "the drop-in and the directories made for it are gone")
	last, err := (&hostfiles.Writer{Root: root, Journal: hostfiles.DefaultJournal}).LastJournal()
	require.NoError(t, err)
	require.Equal(t, "died", last.ID)
	require.Equal(t, hostfiles.JournalRolledBack, last.State)
	require.True(t, a.filesRecovered)
}
