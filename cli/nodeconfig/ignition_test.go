package nodeconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vincent-petithory/dataurl"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// ign is an Ignition config of the given spec version with the given
// top-level sections (",\"storage\":{...}").
func ign(version, sections string) []byte {
	return []byte(`{"ignition":{"version":"` + version + `"}` + sections + `}`)
}

// plain is s as a plain data URL.
func plain(s string) string { return "data:," + dataurl.EscapeString(s) }

// gzipped is s gzip-compressed in a base64 data URL.
func gzipped(t testing.TB, s string) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return "data:;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func files(entries ...string) string {
	return `,"storage":{"files":[` + strings.Join(entries, ",") + `]}`
}

func file(path, source string, extra ...string) string {
	return `{"path":"` + path + `","contents":{"source":"` + source + `"}` + strings.Join(extra, "") + `}`
}

// zfile is a file whose content is gzip-compressed.
func zfile(t testing.TB, path, content string, extra ...string) string {
	return `{"path":"` + path + `","contents":{"source":"` + gzipped(t, content) + `","compression":"gzip"}` + strings.Join(extra, "") + `}`
}

func units(entries ...string) string {
	return `,"systemd":{"units":[` + strings.Join(entries, ",") + `]}`
}

func keys(user string, ks ...string) string {
	return `,"passwd":{"users":[{"name":"` + user + `","sshAuthorizedKeys":["` + strings.Join(ks, `","`) + `"]}]}`
}

func kargs(args ...string) string {
	return `,"kernelArguments":{"shouldExist":["` + strings.Join(args, `","`) + `"]}`
}

func readIgn(t *testing.T, name string, raw []byte) *Config {
	t.Helper()
	c, err := ReadIgnition(name, raw)
	require.NoError(t, err)
	return c
}

func TestDiffIgnition(t *testing.T) {
	const v = "3.4.0"
	chrony := file("/etc/chrony.conf", plain("pool 2.pool.ntp.org iburst\n"))
	unit := `{"name":"chronyd.service","enabled":true,"contents":"[Service]\nExecStart=/usr/sbin/chronyd\n","dropins":[{"name":"10-env.conf","contents":"[Service]\nEnvironment=A=1\n"}]}`
	for _, tc := range []struct {
		name     string
		old, new []byte
		want     lullv1alpha1.Changes
	}{
		{name: "identical configs change nothing",
			old: ign(v, files(chrony)+units(unit)+keys("core", "ssh-ed25519 AAA a")+kargs("nosmt")),
			new: ign(v, files(chrony)+units(unit)+keys("core", "ssh-ed25519 AAA a")+kargs("nosmt"))},
		{name: "the same content gzip-compressed and base64-encoded is no change",
			old: ign(v, files(file("/etc/a", plain("hello, world\n")))),
			new: ign(v, files(zfile(t, "/etc/a", "hello, world\n")))},
		{name: "the same content with appends is no change",
			old: ign(v, files(file("/etc/a", plain("one\ntwo\n")))),
			new: ign(v, files(file("/etc/a", plain("one\n"), `,"append":[{"source":"`+gzipped(t, "two\n")+`","compression":"gzip"}]`)))},
		{name: "content change",
			old:  ign(v, files(chrony)),
			new:  ign(v, files(file("/etc/chrony.conf", plain("pool 3.pool.ntp.org iburst\n")))),
			want: lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}}},
		{name: "mode change",
			old:  ign(v, files(file("/etc/a", plain("x"), `,"mode":420`))),
			new:  ign(v, files(file("/etc/a", plain("x"), `,"mode":384`))),
			want: lullv1alpha1.Changes{Files: []string{"/etc/a"}}},
		{name: "mode 0644 given or defaulted is the same",
			old: ign(v, files(file("/etc/a", plain("x")))),
			new: ign(v, files(file("/etc/a", plain("x"), `,"mode":420`)))},
		{name: "owner change",
			old:  ign(v, files(file("/etc/a", plain("x")))),
			new:  ign(v, files(file("/etc/a", plain("x"), `,"user":{"name":"core"}`))),
			want: lullv1alpha1.Changes{Files: []string{"/etc/a"}}},
		{name: "group change by ID",
			old:  ign(v, files(file("/etc/a", plain("x"), `,"group":{"id":1000}`))),
			new:  ign(v, files(file("/etc/a", plain("x"), `,"group":{"id":1001}`))),
			want: lullv1alpha1.Changes{Files: []string{"/etc/a"}}},
		{name: "owner root by name, by ID 0 or by default is the same",
			old: ign(v, files(file("/etc/a", plain("x"), `,"user":{"id":0},"group":{"name":"root"}`))),
			new: ign(v, files(file("/etc/a", plain("x"))))},
		{name: "added and removed files",
			old:  ign(v, files(file("/etc/gone", plain("x")), file("/etc/kept", plain("y")))),
			new:  ign(v, files(file("/etc/kept", plain("y")), file("/etc/added", plain("z")))),
			want: lullv1alpha1.Changes{Files: []string{"/etc/added", "/etc/gone"}}},
		{name: "a link's new target is a change",
			old:  ign(v, `,"storage":{"links":[{"path":"/etc/localtime","target":"/usr/share/zoneinfo/UTC"}]}`),
			new:  ign(v, `,"storage":{"links":[{"path":"/etc/localtime","target":"/usr/share/zoneinfo/Europe/Paris"}]}`),
			want: lullv1alpha1.Changes{Files: []string{"/etc/localtime"}}},
		{name: "no source is an empty file",
			old: ign(v, files(`{"path":"/etc/a"}`)),
			new: ign(v, files(file("/etc/a", "data:,")))},
		{name: "directories are not compared",
			old: ign(v, `,"storage":{"directories":[{"path":"/etc/a","mode":493}]}`),
			new: ign(v, `,"storage":{"directories":[{"path":"/etc/a","mode":448}]}`)},
		{name: "unit contents change",
			old:  ign(v, units(unit)),
			new:  ign(v, units(strings.Replace(unit, "/usr/sbin/chronyd", "/usr/sbin/chronyd -d", 1))),
			want: lullv1alpha1.Changes{Units: []string{"chronyd.service"}}},
		{name: "a drop-in change is its unit's",
			old:  ign(v, units(unit)),
			new:  ign(v, units(strings.Replace(unit, "A=1", "A=2", 1))),
			want: lullv1alpha1.Changes{Units: []string{"chronyd.service"}}},
		{name: "an added drop-in is its unit's",
			old:  ign(v, units(`{"name":"kubelet.service"}`)),
			new:  ign(v, units(`{"name":"kubelet.service","dropins":[{"name":"20-opts.conf","contents":"[Service]\n"}]}`)),
			want: lullv1alpha1.Changes{Units: []string{"kubelet.service"}}},
		{name: "enabled change",
			old:  ign(v, units(unit)),
			new:  ign(v, units(strings.Replace(unit, `"enabled":true`, `"enabled":false`, 1))),
			want: lullv1alpha1.Changes{Units: []string{"chronyd.service"}}},
		{name: "disabling a unit is a change from leaving it alone",
			old:  ign(v, units(`{"name":"a.service"}`)),
			new:  ign(v, units(`{"name":"a.service","enabled":false}`)),
			want: lullv1alpha1.Changes{Units: []string{"a.service"}}},
		{name: "mask change",
			old:  ign(v, units(`{"name":"rpcbind.service"}`)),
			new:  ign(v, units(`{"name":"rpcbind.service","mask":true}`)),
			want: lullv1alpha1.Changes{Units: []string{"rpcbind.service"}}},
		{name: "a unit file written as a storage file is a unit",
			old:  ign(v, files(file("/etc/systemd/system/a.service", plain("[Service]\n")))),
			new:  ign(v, files(file("/etc/systemd/system/a.service", plain("[Service]\nType=oneshot\n")))),
			want: lullv1alpha1.Changes{Units: []string{"a.service"}}},
		{name: "ssh keys added",
			old:  ign(v, keys("core", "ssh-ed25519 AAA a")),
			new:  ign(v, keys("core", "ssh-ed25519 AAA a", "ssh-ed25519 BBB b")),
			want: lullv1alpha1.Changes{SSHKeys: []string{"core"}}},
		{name: "ssh keys removed",
			old:  ign(v, keys("core", "ssh-ed25519 AAA a")),
			new:  ign(v, ""),
			want: lullv1alpha1.Changes{SSHKeys: []string{"core"}}},
		{name: "ssh keys reordered are no change",
			old: ign(v, keys("core", "ssh-ed25519 AAA a", "ssh-ed25519 BBB b")),
			new: ign(v, keys("core", "ssh-ed25519 BBB b", "ssh-ed25519 AAA a"))},
		{name: "kernel arguments added and removed",
			old:  ign(v, kargs("nosmt", "quiet")),
			new:  ign(v, kargs("quiet", "hugepages=16")),
			want: lullv1alpha1.Changes{KernelArguments: []string{"hugepages=16", "nosmt"}}},
		{name: "kernel arguments that must not exist",
			old:  ign(v, ""),
			new:  ign(v, `,"kernelArguments":{"shouldNotExist":["mitigations=off"]}`),
			want: lullv1alpha1.Changes{KernelArguments: []string{"mitigations=off"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Diff(readIgn(t, "old.ign", tc.old), readIgn(t, "new.ign", tc.new))
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSpecVersions(t *testing.T) {
	body := files(file("/etc/a", plain("x"))) + units(`{"name":"a.service","contents":"[Service]\n"}`) + keys("core", "ssh-ed25519 AAA")
	want := readIgn(t, "3.4.0", ign("3.4.0", body))
	for _, v := range []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0-experimental"} {
		t.Run(v, func(t *testing.T) {
			got := readIgn(t, v+".ign", ign(v, body))
			require.True(t, empty(Diff(want, got)), "%s reads as 3.4.0 does", v)
			require.Equal(t, []byte("x"), got.Files["/etc/a"].Contents)
		})
	}
	t.Run("3.0.0 from testdata", func(t *testing.T) {
		c, err := Load("testdata/v3_0.ign")
		require.NoError(t, err)
		require.Contains(t, c.Files, "/etc/motd")
	})
}

func TestReadIgnitionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want []string
	}{
		{name: "invalid JSON", raw: []byte(`{"ignition":`), want: []string{"bad.ign: invalid Ignition config", "unexpected end of JSON input"}},
		{name: "empty", raw: nil, want: []string{"bad.ign:", "empty"}},
		{name: "relative path", raw: ign("3.4.0", files(file("etc/a", plain("x")))),
			want: []string{"bad.ign: invalid Ignition config", "$.storage.files.0.path", "path not absolute"}},
		{name: "unknown unit type", raw: ign("3.4.0", units(`{"name":"a.conf"}`)),
			want: []string{"bad.ign: invalid Ignition config", "$.systemd.units.0.name"}},
		{name: "spec 2", raw: ign("2.2.0", ""), want: []string{"bad.ign: Ignition spec version \"2.2.0\" is not supported"}},
		{name: "remote source", raw: ign("3.4.0", files(file("/etc/x", "https://user:secret@example.com/x?token=t"))),
			want: []string{"bad.ign: storage.files[/etc/x]: contents from https://example.com/x cannot be compared offline; inline it as a data URL"}},
		{name: "remote append", raw: ign("3.4.0", files(`{"path":"/etc/x","append":[{"source":"s3://bucket/x"}]}`)),
			want: []string{"bad.ign: storage.files[/etc/x]: append[0] from s3://bucket/x cannot be compared offline"}},
		{name: "remote merged config", raw: ign("3.4.0", `,"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://example.com/c.ign"}]}}`),
			want: []string{"bad.ign: ignition.config.merge[0] from https://example.com/c.ign cannot be compared offline"}},
		{name: "a unit name with a slash", raw: ign("3.4.0", units(`{"name":"../../shadow.service","contents":"[Unit]\n"}`)),
			want: []string{"bad.ign: systemd.units[../../shadow.service]: not a unit name"}},
		{name: "a drop-in name with a slash", raw: ign("3.4.0", units(`{"name":"a.service","dropins":[{"name":"../x.conf","contents":""}]}`)),
			want: []string{"bad.ign: systemd.units[a.service].dropins[../x.conf]: a drop-in's name has no '/'"}},
		{name: "bad gzip", raw: ign("3.4.0", files(`{"path":"/etc/x","contents":{"source":"data:,not%20gzip","compression":"gzip"}}`)),
			want: []string{"bad.ign: storage.files[/etc/x]: contents: gzip:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadIgnition("bad.ign", tc.raw)
			require.Error(t, err)
			require.Nil(t, c)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestReadIgnitionMerge(t *testing.T) {
	child := ign("3.2.0", files(file("/etc/b", plain("b"))))
	parent := []byte(`{"ignition":{"version":"3.4.0","config":{"merge":[{"source":"` + dataurl.EncodeBytes(child) + `"}]}}` +
		files(file("/etc/a", plain("a"))) + `}`)
	c := readIgn(t, "merged.ign", parent)
	require.Equal(t, []string{"/etc/a", "/etc/b"}, sortedKeys(c.Files))

	replaced := []byte(`{"ignition":{"version":"3.4.0","config":{"replace":{"source":"` + dataurl.EncodeBytes(child) + `"}}}` +
		files(file("/etc/a", plain("a"))) + `}`)
	c = readIgn(t, "replaced.ign", replaced)
	require.Equal(t, []string{"/etc/b"}, sortedKeys(c.Files))
}

func sortedKeys[V any](m map[string]V) []string { return unionKeys(m, nil) }

func TestMachineConfig(t *testing.T) {
	old, err := Load("testdata/old-mc.yaml")
	require.NoError(t, err)
	require.Equal(t, "testdata/old-mc.yaml", old.Source)
	require.Equal(t, []byte("pool 2.pool.ntp.org iburst\n"), old.Files["/etc/chrony.conf"].Contents)
	require.Equal(t, []string{"nosmt", "hugepages=16"}, old.KernelArguments)

	newer, err := Load("testdata/new-mc.yaml")
	require.NoError(t, err)
	require.Equal(t, lullv1alpha1.Changes{
		Files:           []string{"/etc/chrony.conf"},
		Units:           []string{"chronyd.service"},
		SSHKeys:         []string{"core"},
		KernelArguments: []string{"hugepages=16", "hugepages=32"},
		OSImage:         "quay.io/openshift/os@sha256:2222",
		Extensions:      []string{"kernel-devel", "usbguard"},
		KernelType:      "realtime",
	}, Diff(old, newer))

	t.Run("back to the defaults", func(t *testing.T) {
		base, err := ReadMachineConfig("base.yaml", []byte("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nspec: {}\n"))
		require.NoError(t, err)
		got := Diff(newer, base)
		require.Equal(t, DefaultOSImage, got.OSImage)
		require.Equal(t, "default", got.KernelType)
	})
	t.Run("default and empty kernel types are the same", func(t *testing.T) {
		a, err := ReadMachineConfig("a.json", []byte(`{"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfig","spec":{"kernelType":"default"}}`))
		require.NoError(t, err)
		b, err := ReadMachineConfig("b.yaml", []byte("kind: MachineConfig\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n"))
		require.NoError(t, err)
		require.True(t, empty(Diff(a, b)))
	})
	t.Run("errors name the file and the field", func(t *testing.T) {
		_, err := ReadMachineConfig("mc.yaml", []byte("kind: MachineConfig\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n      - path: etc/x\n"))
		require.ErrorContains(t, err, "mc.yaml: spec.config: invalid Ignition config")
		require.ErrorContains(t, err, "path not absolute")
		_, err = ReadMachineConfig("mc.yaml", []byte("kind: MachineConfig\nspec: [\n"))
		require.ErrorContains(t, err, "mc.yaml: invalid MachineConfig")
		_, err = ReadMachineConfig("mc.yaml", []byte("kind: KubeletConfig\n"))
		require.ErrorContains(t, err, `mc.yaml: kind "KubeletConfig" is not MachineConfig`)
		_, err = ReadMachineConfig("mc.yaml", []byte("apiVersion: v1\nkind: MachineConfig\n"))
		require.ErrorContains(t, err, `mc.yaml: apiVersion "v1"`)
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	for _, tc := range []struct {
		name, content string
		err           string
	}{
		{name: "ign.json", content: string(ign("3.4.0", files(file("/etc/a", plain("x")))))},
		{name: "ign.yaml", content: "ignition:\n  version: 3.4.0\nstorage:\n  files:\n  - path: /etc/a\n    contents:\n      source: data:,x\n"},
		{name: "mc.json", content: `{"apiVersion":"machineconfiguration.openshift.io/v1","kind":"MachineConfig","spec":{"config":` + string(ign("3.2.0", files(file("/etc/a", plain("x"))))) + `}}`},
		{name: "broken.json", content: `{"ignition": {`, err: "broken.json: invalid JSON"},
		{name: "empty", content: "\n", err: "empty: empty: neither an Ignition config nor a MachineConfig"},
		{name: "butane.yaml", content: "variant: fcos\nversion: 1.5.0\n", err: `butane.yaml: a Butane config (variant "fcos")`},
		{name: "pod.yaml", content: "apiVersion: v1\nkind: Pod\n", err: `pod.yaml: kind "Pod": neither`},
		{name: "other.json", content: `{"a":1}`, err: `other.json: neither an Ignition config (no "ignition" key) nor a MachineConfig`},
		{name: "list.yaml", content: "- a\n- b\n", err: "list.yaml: not a YAML or JSON object"},
		{name: "text", content: "hello: [", err: "text: not a YAML or JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.name, tc.content)
			c, err := Load(p)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Nil(t, c)
				return
			}
			require.NoError(t, err)
			require.Equal(t, p, c.Source)
			require.Equal(t, []byte("x"), c.Files["/etc/a"].Contents)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := Load(filepath.Join(dir, "missing.ign"))
		require.ErrorIs(t, err, os.ErrNotExist)
		require.ErrorContains(t, err, "missing.ign")
	})
	t.Run("directory", func(t *testing.T) {
		root := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "a"), []byte("x"), 0o644))
		c, err := Load(root)
		require.NoError(t, err)
		require.Equal(t, []byte("x"), c.Files["/etc/a"].Contents)
	})
}

func TestIgnitionTestdata(t *testing.T) {
	old, err := Load("testdata/old.ign")
	require.NoError(t, err)
	newer, err := Load("testdata/new.ign")
	require.NoError(t, err)
	require.Equal(t, lullv1alpha1.Changes{
		Files:   []string{"/etc/motd", "/etc/sysctl.d/90-net.conf"},
		Units:   []string{"chronyd.service"},
		SSHKeys: []string{"core"},
	}, Diff(old, newer), fmt.Sprintf("%+v", newer.Files))
}
