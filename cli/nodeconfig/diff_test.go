package nodeconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestFiles(t *testing.T) {
	const v = "3.4.0"
	old := readIgn(t, "old.ign", ign(v, `,"storage":{"files":[`+
		file("/etc/a", plain("old"))+","+file("/etc/gone", plain("x"))+","+file("/etc/same", plain("s"))+","+
		file("/etc/owner", plain("o"))+
		`],"links":[{"path":"/etc/link","target":"/a"}]}`+
		units(`{"name":"a.service","contents":"[Service]\nA=1\n","dropins":[{"name":"10.conf","contents":"[Service]\n"}]}`,
			`{"name":"b.service","contents":"[Service]\n"}`)))
	newer := readIgn(t, "new.ign", ign(v, `,"storage":{"files":[`+
		file("/etc/a", plain("new"), `,"mode":384,"user":{"name":"core"}`)+","+file("/etc/added", plain("y"))+","+zfile(t, "/etc/same", "s")+","+
		file("/etc/owner", plain("o"), `,"group":{"id":10}`)+
		`],"links":[{"path":"/etc/link","target":"/b"}]}`+
		units(`{"name":"a.service","contents":"[Service]\nA=2\n","dropins":[{"name":"20.conf","contents":""}]}`,
			`{"name":"b.service","contents":"[Service]\n","mask":true}`)))

	require.Equal(t, lullv1alpha1.Changes{
		Files: []string{"/etc/a", "/etc/added", "/etc/gone", "/etc/link", "/etc/owner"},
		Units: []string{"a.service", "b.service"},
	}, Diff(old, newer))

	root := "root"
	require.Equal(t, []lullv1alpha1.ConfigFile{
		{Path: "/etc/a", Previous: sha("old"), Contents: []byte("new"), Mode: ptr.To[int32](0o600), User: "core", Group: root,
			PreviousMode: ptr.To[int32](0o644), PreviousUser: root},
		{Path: "/etc/added", Contents: []byte("y"), Mode: ptr.To[int32](0o644), User: root, Group: root},
		{Path: "/etc/gone", Previous: sha("x"), Absent: true},
		{Path: "/etc/owner", Previous: sha("o"), Contents: []byte("o"), Mode: ptr.To[int32](0o644), User: root, Group: "10", PreviousGroup: root},
		{Path: "/etc/systemd/system/a.service", Previous: sha("[Service]\nA=1\n"), Contents: []byte("[Service]\nA=2\n"), Mode: ptr.To[int32](0o644), User: root, Group: root},
		{Path: "/etc/systemd/system/a.service.d/10.conf", Previous: sha("[Service]\n"), Absent: true},
		{Path: "/etc/systemd/system/a.service.d/20.conf", Contents: []byte{}, Mode: ptr.To[int32](0o644), User: root, Group: root},
	}, Files(old, newer))

	require.Equal(t, lullv1alpha1.Changes{
		Files: []string{"/etc/link"},
		Units: []string{"b.service"},
	}, Unwritable(old, newer), "links and masks are not files a NodeConfig writes")

	require.Empty(t, Files(old, old))
	require.True(t, empty(Unwritable(old, old)))
}

func TestUnwritableLists(t *testing.T) {
	a := &Config{KernelArguments: []string{"a"}, OSImage: "img:1", SSHKeys: map[string][]string{"core": {"k"}},
		Files: map[string]File{"/etc/x": {Contents: []byte("x")}}}
	b := &Config{KernelArguments: []string{"b"}, OSImage: "img:2", Extensions: []string{"e"}, KernelType: "realtime",
		Files: map[string]File{"/etc/x": {Contents: []byte("y")}}}
	require.Equal(t, lullv1alpha1.Changes{
		SSHKeys: []string{"core"}, KernelArguments: []string{"a", "b"}, OSImage: "img:2",
		Extensions: []string{"e"}, KernelType: "realtime",
	}, Unwritable(a, b))
	require.Len(t, Files(a, b), 1)
}

func TestDiffNil(t *testing.T) {
	require.True(t, empty(Diff(nil, nil)))
	require.Empty(t, Files(nil, nil))
	c := &Config{Files: map[string]File{"/etc/a": {}}, Units: map[string]Unit{"a.service": {Mask: true}}}
	require.Equal(t, lullv1alpha1.Changes{Files: []string{"/etc/a"}, Units: []string{"a.service"}}, Diff(nil, c))
	require.Equal(t, lullv1alpha1.Changes{Files: []string{"/etc/a"}, Units: []string{"a.service"}}, Diff(c, nil))
	require.Equal(t, []lullv1alpha1.ConfigFile{{Path: "/etc/a", Previous: sha(""), Absent: true}}, Files(c, nil))
}

func TestDiffHandBuilt(t *testing.T) {
	// Owners given as "" or "0" are root; SSH keys need not be sorted;
	// a user with no keys is one without an entry.
	a := &Config{
		Files:   map[string]File{"/etc/a": {Contents: []byte("x"), Mode: 0o644, User: "0", Group: ""}},
		SSHKeys: map[string][]string{"core": {"b", "a"}, "nobody": nil},
	}
	b := &Config{
		Files:   map[string]File{"/etc/a": {Contents: []byte("x"), Mode: 0o644, User: "root", Group: "root"}},
		SSHKeys: map[string][]string{"core": {"a", "b", "a"}},
	}
	require.True(t, empty(Diff(a, b)))
}

func TestCheck(t *testing.T) {
	many := func(n int, f string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(f, i)
		}
		return out
	}
	require.NoError(t, Check(lullv1alpha1.Changes{}))
	require.NoError(t, Check(lullv1alpha1.Changes{
		Files: many(lullv1alpha1.MaxChangedFiles, "/etc/f%d"), Units: many(lullv1alpha1.MaxChangedUnits, "u%d.service"),
	}))

	err := Check(lullv1alpha1.Changes{Files: many(lullv1alpha1.MaxChangedFiles+1, "/etc/f%d")})
	require.EqualError(t, err, "1025 files changed, more than the 1024 a change set may list")

	err = Check(lullv1alpha1.Changes{
		Files: many(2000, "/etc/f%d"), Units: many(lullv1alpha1.MaxChangedUnits+1, "u%d.service"),
		KernelArguments: many(129, "a%d"),
	})
	require.ErrorContains(t, err, "2000 files changed")
	require.ErrorContains(t, err, "513 units changed, more than the 512")
	require.ErrorContains(t, err, "129 kernel arguments changed, more than the 128")

	// Diff returns a change set over the limits all the same.
	a, b := &Config{Files: map[string]File{}}, &Config{Files: map[string]File{}}
	for i := range lullv1alpha1.MaxChangedFiles + 1 {
		b.Files[fmt.Sprintf("/etc/f%d", i)] = File{}
	}
	ch := Diff(a, b)
	require.Len(t, ch.Files, lullv1alpha1.MaxChangedFiles+1)
	require.Error(t, Check(ch))
}

func empty(c lullv1alpha1.Changes) bool { return c.Empty() }
