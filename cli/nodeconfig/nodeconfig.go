// Package nodeconfig compares two configurations of a node — Ignition
// configs, MachineConfigs or directory trees standing for "/" — and says
// what changes from one to the other, as a change set (spec.changes) and as
// the files a NodeConfig writes. It reads local data only: no cluster, no
// network.
package nodeconfig

import (
	"fmt"
	"path"
	"slices"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Config is one node configuration, whatever it was read from.
type Config struct {
	// Source is what it was read from, for errors ("old.ign").
	Source string
	// Files by absolute, clean path; never unit files, drop-ins,
	// enablement links, authorized_keys or /etc/kernel/cmdline, which
	// are read as what they mean (Units, SSHKeys, KernelArguments).
	Files map[string]File
	// Units by unit name ("chronyd.service").
	Units map[string]Unit
	// SSHKeys are each user's authorized keys, sorted, each once; a user
	// without keys is not listed.
	SSHKeys map[string][]string
	// KernelArguments are a kernel command line, in order, repeats
	// included: a MachineConfig's kernelArguments, a tree's
	// /etc/kernel/cmdline. Each is one argument as the kernel splits the
	// line, as written, quotes included (`dyndbg="file a.c +p"`, see
	// splitCmdline).
	KernelArguments []string
	// KernelArgumentsPresent are arguments the node must have, wherever
	// on its command line (Ignition's kernelArguments.shouldExist): a
	// set, each entry as given.
	KernelArgumentsPresent []string
	// KernelArgumentsAbsent are arguments the node must not have
	// (Ignition's kernelArguments.shouldNotExist): a set.
	KernelArgumentsAbsent []string
	// OSImage is the OS image (a MachineConfig's osImageURL); empty: the
	// default one.
	OSImage string
	// Extensions (a MachineConfig's), sorted, each once.
	Extensions []string
	// KernelType (a MachineConfig's); empty and "default" are the same.
	KernelType string
	// FIPS (a MachineConfig's spec.fips): the node runs in FIPS mode.
	// The Machine Config Operator sets it up when it installs a node and
	// refuses to change it on a running one.
	FIPS bool
}

// File is a file, or a link, on the node.
type File struct {
	// Contents of a regular file.
	Contents []byte
	// Link is a symbolic (or, with Hard, hard) link's target; such a file
	// has no contents and compares as a file whose content is
	// "link -> target": a new target is a change of the file. A
	// NodeConfig cannot write links (see Unwritable).
	Link string
	Hard bool
	// Mode is the permission bits, setuid, setgid and sticky included
	// (0o644). Readers default it to 0o644 for files and set 0o777 for
	// links.
	Mode int32
	// User and Group own the file: a name or a numeric ID, as given.
	// Readers write "root" for none given and for ID 0, so an Ignition
	// config without owners and a tree of root's files compare equal;
	// other names and IDs are compared as given (which name an ID has is
	// the node's /etc/passwd's business).
	User, Group string
}

// Unit is a systemd unit: its unit file and drop-ins under
// /etc/systemd/system, and whether it is enabled or masked.
type Unit struct {
	// File is the unit file /etc/systemd/system/<name>; nil: none is
	// written (a vendor unit enabled, masked or given drop-ins).
	File *File
	// Dropins by file name ("10-limits.conf"), at
	// /etc/systemd/system/<name>.d/<dropin>.
	Dropins map[string]File
	// Enabled: true enables the unit, false disables it, nil leaves it
	// as it is — so nil and false differ. In a directory tree a unit is
	// enabled when a *.wants/ or *.requires/ directory links to it, and
	// nil otherwise.
	Enabled *bool
	// Mask: the unit is masked (its unit file links to /dev/null).
	Mask bool
}

const (
	rootOwner    = "root"
	defaultMode  = 0o644
	linkMode     = 0o777
	systemdDir   = lullv1alpha1.SystemdUnitDir
	kernelCmd    = "/etc/kernel/cmdline"
	maskTarget   = "/dev/null"
	authKeys     = ".ssh/authorized_keys"
	authKeysDirs = ".ssh/authorized_keys.d/"
)

// unitTypes are the unit types a unit file's name may end with.
var unitTypes = map[string]bool{
	".service": true, ".socket": true, ".device": true, ".mount": true, ".automount": true,
	".swap": true, ".target": true, ".path": true, ".timer": true, ".slice": true, ".scope": true,
}

func newConfig(source string) *Config {
	return &Config{
		Source:  source,
		Files:   map[string]File{},
		Units:   map[string]Unit{},
		SSHKeys: map[string][]string{},
	}
}

// owner is a file's user or group as readers record it: "root" for none
// and for ID 0.
func owner(s string) string {
	if s == "" || s == "0" {
		return rootOwner
	}
	return s
}

func isUnitName(name string) bool {
	ext := path.Ext(name)
	return unitTypes[ext] && len(name) > len(ext) && !strings.ContainsRune(name, '/')
}

// place puts what stands at the clean absolute path p into the
// configuration, as what it means on the node: a unit file, a drop-in or
// an enablement link is a unit's, authorized_keys are a user's SSH keys,
// /etc/kernel/cmdline is the kernel arguments, anything else a file.
func (c *Config) place(p string, f File) error {
	if f.Link == "" {
		if p == kernelCmd {
			c.KernelArguments = append(c.KernelArguments, splitCmdline(string(f.Contents))...)
			return nil
		}
		if user, ok := keysUser(p); ok {
			c.SSHKeys[user] = append(c.SSHKeys[user], splitKeys(string(f.Contents))...)
			return nil
		}
	}
	if rest, ok := strings.CutPrefix(p, systemdDir); ok {
		if placed, err := c.placeSystemd(p, rest, f); placed || err != nil {
			return err
		}
	}
	if _, dup := c.Files[p]; dup {
		return fmt.Errorf("%s is given twice", p)
	}
	c.Files[p] = f
	return nil
}

// placeSystemd places what stands at /etc/systemd/system/<rest>, if it is
// a unit's.
func (c *Config) placeSystemd(p, rest string, f File) (bool, error) {
	dir, name, nested := strings.Cut(rest, "/")
	if !nested {
		if !isUnitName(rest) {
			return false, nil
		}
		u := c.unit(rest)
		switch {
		case f.Link == maskTarget && !f.Hard:
			u.Mask = true
		case u.File != nil:
			return true, fmt.Errorf("%s is given twice", p)
		default:
			u.File = &f
		}
		c.Units[rest] = u
		return true, nil
	}
	if strings.ContainsRune(name, '/') {
		return false, nil
	}
	if unit, ok := strings.CutSuffix(dir, ".d"); ok && isUnitName(unit) && strings.HasSuffix(name, ".conf") {
		u := c.unit(unit)
		if _, dup := u.Dropins[name]; dup {
			return true, fmt.Errorf("%s is given twice", p)
		}
		u.Dropins[name] = f
		c.Units[unit] = u
		return true, nil
	}
	if f.Link != "" && !f.Hard && isUnitName(name) {
		wanting, ok := strings.CutSuffix(dir, ".wants")
		if !ok {
			wanting, ok = strings.CutSuffix(dir, ".requires")
		}
		if ok && isUnitName(wanting) {
			u := c.unit(name)
			enabled := true
			u.Enabled = &enabled
			c.Units[name] = u
			return true, nil
		}
	}
	return false, nil
}

func (c *Config) unit(name string) Unit {
	u := c.Units[name]
	if u.Dropins == nil {
		u.Dropins = map[string]File{}
	}
	return u
}

// keysUser reports whose authorized keys the file p holds, if it holds
// any: /root/.ssh/authorized_keys is root's, /home/<user>/... (or
// /var/home/<user>/...) a user's, and so are the files in an
// authorized_keys.d directory beside it (as ssh-key-dir reads them).
func keysUser(p string) (string, bool) {
	var user, rest string
	if r, ok := strings.CutPrefix(p, "/root/"); ok {
		user, rest = rootOwner, r
	} else {
		home, ok := strings.CutPrefix(p, "/home/")
		if !ok {
			home, ok = strings.CutPrefix(p, "/var/home/")
		}
		if !ok {
			return "", false
		}
		user, rest, ok = strings.Cut(home, "/")
		if !ok || user == "" {
			return "", false
		}
	}
	if rest == authKeys {
		return user, true
	}
	if name, ok := strings.CutPrefix(rest, authKeysDirs); ok && name != "" && !strings.ContainsRune(name, '/') {
		return user, true
	}
	return "", false
}

// splitKeys are the keys in an authorized_keys text: one a line, blank
// lines and comments left out.
func splitKeys(s string) []string {
	var keys []string
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	return keys
}

// normalize sorts what is a set and drops users without keys.
func (c *Config) normalize() {
	for user, keys := range c.SSHKeys {
		if keys = sortedSet(keys); len(keys) == 0 {
			delete(c.SSHKeys, user)
		} else {
			c.SSHKeys[user] = keys
		}
	}
	c.Extensions = sortedSet(c.Extensions)
}

// sortedSet sorts s in place and drops repeats.
func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
