package nodeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
)

// DefaultOSImage stands for the OS image in a change set when the new
// configuration names none (back to the default image): the change must
// still be seen.
const DefaultOSImage = "(default)"

// Limits of a change set's lists besides files and units, as the
// NodeMaintenance CRD validates them.
const (
	maxChangedSSHKeys         = 64
	maxChangedKernelArguments = 128
	maxChangedExtensions      = 64
)

// Diff is what changes from one configuration to the other, each list
// sorted, each entry once. A nil configuration is an empty one.
//
// Files are the paths whose content, link target, mode or owner differ
// or that only one has; Units the units whose unit file, a drop-in,
// enablement or mask differ; SSHKeys the users whose set of keys differs
// (order and repeats do not count); KernelArguments those the command
// lines, compared in order with repeats, do not have alike (see
// changedInOrder), and those only one has among the arguments that must
// be present, or absent, wherever (Ignition's); Extensions those that
// only one has; OSImage and KernelType the new value when it differs
// (DefaultOSImage, or "default", when the new one names none).
//
// A change of FIPS mode is listed among Extensions as "spec.fips=true"
// (or "=false", the new value): the change set has no field for it, and
// no rule matches an extension, so the built-in default for changes
// decides it (drain and reboot) and no rule can call it harmless.
func Diff(from, to *Config) lullv1alpha1.Changes {
	from, to = orEmpty(from), orEmpty(to)
	kargs := changedInOrder(from.KernelArguments, to.KernelArguments)
	kargs = append(kargs, symmetric(from.KernelArgumentsPresent, to.KernelArgumentsPresent)...)
	kargs = append(kargs, symmetric(from.KernelArgumentsAbsent, to.KernelArgumentsAbsent)...)
	ch := lullv1alpha1.Changes{
		Files:           changed(from.Files, to.Files, sameFile),
		Units:           changed(from.Units, to.Units, sameUnit),
		SSHKeys:         changedKeys(from.SSHKeys, to.SSHKeys),
		KernelArguments: sortedSet(kargs),
		Extensions:      symmetric(from.Extensions, to.Extensions),
	}
	if from.FIPS != to.FIPS {
		ch.Extensions = sortedSet(append(ch.Extensions, fipsChange(to.FIPS)))
	}
	if from.OSImage != to.OSImage {
		ch.OSImage = cmpOr(to.OSImage, DefaultOSImage)
	}
	if kernelType(from.KernelType) != kernelType(to.KernelType) {
		ch.KernelType = kernelType(to.KernelType)
	}
	return ch
}

// Files are what a NodeConfig writes to go from one configuration to the
// other, sorted by path: each changed or added file with its new content,
// mode and owner, each removed one as Absent, with Previous the SHA-256
// of its old content ("" where it had none: the file must not exist)
// and, for a file that stays, PreviousMode, PreviousUser and
// PreviousGroup its old mode and owner where they differ from the new
// ones (lull-agent expects the file to have them before it writes).
// Unit files and drop-ins are written at /etc/systemd/system/<unit> and
// /etc/systemd/system/<unit>.d/<dropin>. A NodeConfig writes regular
// files only: links, enablement, masks and what is not a file (SSH keys,
// kernel arguments, the OS image…) are left out; Unwritable says which.
func Files(from, to *Config) []lullv1alpha1.ConfigFile {
	from, to = orEmpty(from), orEmpty(to)
	var out []lullv1alpha1.ConfigFile
	add := func(p string, a, b *File) {
		if !sameFilePtr(a, b) && !isLink(a) && !isLink(b) {
			out = append(out, configFile(p, a, b))
		}
	}
	for _, p := range changed(from.Files, to.Files, sameFile) {
		add(p, fileAt(from.Files, p), fileAt(to.Files, p))
	}
	for _, name := range changed(from.Units, to.Units, sameUnit) {
		a, b := from.Units[name], to.Units[name]
		add(systemdDir+name, a.File, b.File)
		for _, d := range unionKeys(a.Dropins, b.Dropins) {
			add(systemdDir+name+".d/"+d, fileAt(a.Dropins, d), fileAt(b.Dropins, d))
		}
	}
	slices.SortFunc(out, func(x, y lullv1alpha1.ConfigFile) int { return strings.Compare(x.Path, y.Path) })
	return out
}

// Unwritable is the part of Diff(from, to) that Files(from, to) does not
// write: files and unit files or drop-ins that are a link on either side,
// units whose enablement or mask changes, and all that is not a file
// (SSH keys, kernel arguments, OS image, extensions, kernel type, FIPS
// mode). Before handing a NodeConfig to lull-agent, a caller refuses or
// writes these some other way.
func Unwritable(from, to *Config) lullv1alpha1.Changes {
	from, to = orEmpty(from), orEmpty(to)
	ch := Diff(from, to)
	ch.Files = slices.DeleteFunc(ch.Files, func(p string) bool {
		return !isLink(fileAt(from.Files, p)) && !isLink(fileAt(to.Files, p))
	})
	ch.Units = slices.DeleteFunc(ch.Units, func(name string) bool {
		a, b := from.Units[name], to.Units[name]
		if !sameBool(a.Enabled, b.Enabled) || a.Mask != b.Mask {
			return false
		}
		if !sameFilePtr(a.File, b.File) && (isLink(a.File) || isLink(b.File)) {
			return false
		}
		for _, d := range unionKeys(a.Dropins, b.Dropins) {
			x, y := fileAt(a.Dropins, d), fileAt(b.Dropins, d)
			if !sameFilePtr(x, y) && (isLink(x) || isLink(y)) {
				return false
			}
		}
		return true
	})
	if len(ch.Files) == 0 {
		ch.Files = nil
	}
	if len(ch.Units) == 0 {
		ch.Units = nil
	}
	return ch
}

// Check says which limit of a change set c exceeds (MaxChangedFiles,
// MaxChangedUnits and the other lists' MaxItems), all of them; nil if
// none. Diff returns a change set whatever its size: callers refuse one
// that Check rejects, as the API server would.
func Check(c lullv1alpha1.Changes) error {
	var errs []error
	limit := func(n, most int, what string) {
		if n > most {
			errs = append(errs, fmt.Errorf("%d %s changed, more than the %d a change set may list", n, what, most))
		}
	}
	limit(len(c.Files), lullv1alpha1.MaxChangedFiles, "files")
	limit(len(c.Units), lullv1alpha1.MaxChangedUnits, "units")
	limit(len(c.SSHKeys), maxChangedSSHKeys, "users' SSH keys")
	limit(len(c.KernelArguments), maxChangedKernelArguments, "kernel arguments")
	limit(len(c.Extensions), maxChangedExtensions, "extensions")
	return errors.Join(errs...)
}

func orEmpty(c *Config) *Config {
	if c == nil {
		return &Config{}
	}
	return c
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func kernelType(t string) string { return cmpOr(t, "default") }

// changed are the keys whose values differ or that only one map has,
// sorted.
func changed[V any](a, b map[string]V, same func(x, y V) bool) []string {
	var out []string
	for k, x := range a {
		if y, ok := b[k]; !ok || !same(x, y) {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// changedKeys are the users whose sets of keys differ; no keys and no
// entry are the same.
func changedKeys(a, b map[string][]string) []string {
	var out []string
	for _, user := range unionKeys(a, b) {
		if !slices.Equal(sortedSet(slices.Clone(a[user])), sortedSet(slices.Clone(b[user]))) {
			out = append(out, user)
		}
	}
	return out
}

// symmetric are the strings only one of a and b has, sorted, each once.
func symmetric(a, b []string) []string {
	inA, inB := set(a), set(b)
	var out []string
	for s := range inA {
		if !inB[s] {
			out = append(out, s)
		}
	}
	for s := range inB {
		if !inA[s] {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func set(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := slices.AppendSeq(slices.Collect(maps.Keys(a)), maps.Keys(b))
	return sortedSet(keys)
}

func sameFile(a, b File) bool {
	return a.Link == b.Link && a.Hard == b.Hard && a.Mode == b.Mode &&
		owner(a.User) == owner(b.User) && owner(a.Group) == owner(b.Group) &&
		bytes.Equal(a.Contents, b.Contents)
}

func sameFilePtr(a, b *File) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameFile(*a, *b)
}

func sameBool(a, b *bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameUnit(a, b Unit) bool {
	return a.Mask == b.Mask && sameBool(a.Enabled, b.Enabled) && sameFilePtr(a.File, b.File) &&
		maps.EqualFunc(a.Dropins, b.Dropins, sameFile)
}

func isLink(f *File) bool { return f != nil && f.Link != "" }

func fileAt(m map[string]File, p string) *File {
	if f, ok := m[p]; ok {
		return &f
	}
	return nil
}

// configFile is what a NodeConfig says to go from a to b at p (either may
// be nil: no file).
func configFile(p string, a, b *File) lullv1alpha1.ConfigFile {
	cf := lullv1alpha1.ConfigFile{Path: p}
	if a != nil {
		cf.Previous = hostfiles.SHA256(a.Contents)
	}
	if b == nil {
		cf.Absent = true
		return cf
	}
	mode := b.Mode
	cf.Contents, cf.Mode, cf.User, cf.Group = bytes.Clone(b.Contents), &mode, owner(b.User), owner(b.Group)
	// The old mode and owner where they change: lull-agent expects the
	// file to have them (or the new ones) before it writes.
	if a != nil {
		if a.Mode != b.Mode {
			prev := a.Mode
			cf.PreviousMode = &prev
		}
		if owner(a.User) != cf.User {
			cf.PreviousUser = owner(a.User)
		}
		if owner(a.Group) != cf.Group {
			cf.PreviousGroup = owner(a.Group)
		}
	}
	return cf
}
