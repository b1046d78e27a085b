package nodeconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// readMC reads a MachineConfig with the given spec fields.
func readMC(t *testing.T, spec map[string]any) *Config {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig", "spec": spec})
	require.NoError(t, err)
	c, err := ReadMachineConfig("mc.json", raw)
	require.NoError(t, err)
	return c
}

// kargsMC is a MachineConfig whose spec.kernelArguments are args.
func kargsMC(t *testing.T, args ...string) *Config {
	return readMC(t, map[string]any{"kernelArguments": args})
}

// cmdlineTree is a directory tree whose etc/kernel/cmdline is cmdline.
func cmdlineTree(t *testing.T, cmdline string) *Config {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc", "kernel"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "kernel", "cmdline"), []byte(cmdline), 0o644))
	return readDir(t, root)
}

func TestSplitCmdline(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{line: "", want: nil},
		{line: " \t\n", want: nil},
		{line: "  quiet\tnosmt\r\nhugepages=16\v\f", want: []string{"quiet", "nosmt", "hugepages=16"}},
		{line: `dyndbg="file a.c +p" quiet`, want: []string{`dyndbg="file a.c +p"`, "quiet"}},
		{line: `"a b" c`, want: []string{`"a b"`, "c"}},
		{line: `a="x y"z" w" b`, want: []string{`a="x y"z" w"`, "b"}},
		{line: `a="" b`, want: []string{`a=""`, "b"}},
		{line: `a="unclosed b c`, want: []string{`a="unclosed b c`}},
		{line: `a='1 2'`, want: []string{`a='1`, `2'`}},
		{line: "init=/bin/sh -- -x 1", want: []string{"init=/bin/sh", "--", "-x", "1"}},
	} {
		require.Equal(t, tc.want, splitCmdline(tc.line), "%q", tc.line)
	}
}

// TestKernelArgumentsQuoted: double-quoted text is part of one argument,
// as the kernel (next_arg) and the Machine Config Operator read it, in a
// MachineConfig's kernelArguments and in a tree's etc/kernel/cmdline.
func TestKernelArgumentsQuoted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new []string
		want     []string
	}{
		{name: "quoted values swapping words are a change",
			old:  []string{`a="1 2" b="3 4"`},
			new:  []string{`a="1 4" b="3 2"`},
			want: []string{`a="1 2"`, `a="1 4"`, `b="3 2"`, `b="3 4"`}},
		{name: "a quoted value is one argument a dyndbg=* rule matches",
			old:  []string{`dyndbg="file a.c +p"`},
			new:  []string{`dyndbg="file b.c +p"`},
			want: []string{`dyndbg="file a.c +p"`, `dyndbg="file b.c +p"`}},
		{name: "spaces inside quotes are kept as written",
			old:  []string{`mod.opt="x  y"`},
			new:  []string{`mod.opt="x y"`},
			want: []string{`mod.opt="x  y"`, `mod.opt="x y"`}},
	} {
		t.Run("MachineConfig: "+tc.name, func(t *testing.T) {
			got := Diff(kargsMC(t, tc.old...), kargsMC(t, tc.new...))
			require.Equal(t, lullv1alpha1.Changes{KernelArguments: tc.want}, got)
		})
		t.Run("etc/kernel/cmdline: "+tc.name, func(t *testing.T) {
			got := Diff(cmdlineTree(t, strings.Join(tc.old, " ")), cmdlineTree(t, strings.Join(tc.new, " ")))
			require.Equal(t, lullv1alpha1.Changes{KernelArguments: tc.want}, got)
		})
	}
	t.Run("etc/kernel/cmdline: the same quoted arguments differently spaced are no change", func(t *testing.T) {
		got := Diff(cmdlineTree(t, `quiet  a="1 2"  b="3 4"`), cmdlineTree(t, "quiet\ta=\"1 2\" b=\"3 4\"\n"))
		require.True(t, empty(got))
	})
}

// TestKernelArgumentsInOrder: a MachineConfig's kernelArguments and a
// tree's etc/kernel/cmdline are read in order, repeats included (the
// kernel reads them so, and the Machine Config Operator reboots for any
// difference); Ignition's kernelArguments.shouldExist stays a set.
func TestKernelArgumentsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new []string
		want     []string
	}{
		{name: "reversed consoles are a change of both (the last is /dev/console)",
			old:  []string{"console=tty0", "console=ttyS0,115200"},
			new:  []string{"console=ttyS0,115200", "console=tty0"},
			want: []string{"console=tty0", "console=ttyS0,115200"}},
		{name: "a repeat that goes is a change",
			old:  []string{"console=ttyS0", "quiet", "console=ttyS0"},
			new:  []string{"console=ttyS0", "quiet"},
			want: []string{"console=ttyS0"}},
		{name: "a repeat that comes is a change",
			old:  []string{"hugepagesz=1G", "hugepages=4"},
			new:  []string{"hugepagesz=1G", "hugepages=4", "hugepagesz=1G", "hugepages=4"},
			want: []string{"hugepages=4", "hugepagesz=1G"}},
		{name: "an argument added in front moves no other",
			old:  []string{"quiet", "nosmt"},
			new:  []string{"rd.break", "quiet", "nosmt"},
			want: []string{"rd.break"}},
		{name: "a moved argument and those it passes change",
			old:  []string{"a", "b", "c", "d"},
			new:  []string{"a", "c", "d", "b"},
			want: []string{"b", "c", "d"}},
		{name: "the same list is no change",
			old: []string{"console=tty0", "console=ttyS0,115200", "console=tty0"},
			new: []string{"console=tty0", "console=ttyS0,115200", "console=tty0"}},
	} {
		t.Run("MachineConfig: "+tc.name, func(t *testing.T) {
			got := Diff(kargsMC(t, tc.old...), kargsMC(t, tc.new...))
			require.Equal(t, lullv1alpha1.Changes{KernelArguments: tc.want}, got)
		})
		t.Run("etc/kernel/cmdline: "+tc.name, func(t *testing.T) {
			got := Diff(cmdlineTree(t, strings.Join(tc.old, " ")), cmdlineTree(t, strings.Join(tc.new, " ")))
			require.Equal(t, lullv1alpha1.Changes{KernelArguments: tc.want}, got)
		})
	}

	t.Run("Ignition: shouldExist reordered is no change", func(t *testing.T) {
		// Ignition appends each missing argument wherever, and refuses
		// repeats.
		old := readIgn(t, "old.ign", ign("3.4.0", kargs("console=tty0", "console=ttyS0,115200")))
		newer := readIgn(t, "new.ign", ign("3.4.0", kargs("console=ttyS0,115200", "console=tty0")))
		require.True(t, empty(Diff(old, newer)))
	})
}

// TestMachineConfigFIPS: a change of spec.fips, which the Machine Config
// Operator refuses on a running node, is a change of a kind no
// DisruptionPolicy rule matches (the built-in default drains and reboots
// for it), never no change.
func TestMachineConfigFIPS(t *testing.T) {
	off, on := readMC(t, map[string]any{"fips": false}), readMC(t, map[string]any{"fips": true})
	unmatchable := map[lullv1alpha1.ChangeKind]bool{lullv1alpha1.ChangeExtension: true, lullv1alpha1.ChangeKernelType: true}
	for _, tc := range []struct {
		name     string
		from, to *Config
		want     string
	}{
		{name: "false to true", from: off, to: on, want: "spec.fips=true"},
		{name: "true to false", from: on, to: off, want: "spec.fips=false"},
		{name: "none to true", from: readMC(t, map[string]any{}), to: on, want: "spec.fips=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := Diff(tc.from, tc.to)
			require.Equal(t, lullv1alpha1.Changes{Extensions: []string{tc.want}}, ch)
			for _, c := range ch.List() {
				require.True(t, unmatchable[c.Kind], "%s: a change some rule could call harmless", c)
			}
			require.Equal(t, ch, Unwritable(tc.from, tc.to), "lull-agent cannot switch FIPS mode")
		})
	}
	require.True(t, empty(Diff(on, readMC(t, map[string]any{"fips": true}))))
	require.True(t, empty(Diff(off, readMC(t, map[string]any{}))), "no spec.fips is false")
}
