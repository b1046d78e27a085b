package v1alpha1

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits of a change set (spec.changes).
const (
	MaxChangedFiles = 1024
	MaxChangedUnits = 512
	// MaxStepChanges is how many changes a planned step lists by name.
	MaxStepChanges = 16
	// ConfigNamespace holds the NodeConfigs lull-agent writes.
	ConfigNamespace = "lull-configs"
)

// Changes are what a request changes on its node. Each entry is one
// change, decided by the first DisruptionPolicy rule that matches it.
type Changes struct {
	// Files changed, added or removed, by absolute, clean path (unit
	// files and drop-ins are units): no empty, "." or ".." segment, no
	// trailing slash, so that a rule matching /etc/containerd/certs.d/**
	// cannot be made to decide /etc/containerd/certs.d/../../systemd/x.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^(/([^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+))+$`
	Files []string `json:"files,omitempty"`
	// Units whose unit file or a drop-in changed ("chronyd.service").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.@:\\-]+$`
	Units []string `json:"units,omitempty"`
	// SSHKeys are the users whose authorized SSH keys changed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	SSHKeys []string `json:"sshKeys,omitempty"`
	// KernelArguments added or removed, as written ("hugepages=16").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	KernelArguments []string `json:"kernelArguments,omitempty"`
	// OSImage is the new OS image, when it changes.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	OSImage string `json:"osImage,omitempty"`
	// Extensions added or removed (a MachineConfig's); no rule matches
	// them: they are drained and rebooted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Extensions []string `json:"extensions,omitempty"`
	// KernelType is the new kernel type (a MachineConfig's), when it
	// changes; drained and rebooted.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	KernelType string `json:"kernelType,omitempty"`
	// Config names a NodeConfig in the namespace lull-configs: the new
	// content of the changed files, which lull-agent writes under the
	// lease before the plan's host steps (docs/actions.md, "The write
	// phase"). Without it lull plans and gates the change and something
	// else writes it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Config string `json:"config,omitempty"`
}

// ChangeKind is what a change touches.
type ChangeKind string

const (
	ChangeFile           ChangeKind = "file"
	ChangeUnit           ChangeKind = "unit"
	ChangeSSHKeys        ChangeKind = "sshKeys"
	ChangeKernelArgument ChangeKind = "kernelArgument"
	ChangeOSImage        ChangeKind = "osImage"
	ChangeExtension      ChangeKind = "extension"
	ChangeKernelType     ChangeKind = "kernelType"
)

// Change is one entry of a change set.
type Change struct {
	Kind ChangeKind `json:"kind"`
	// Name is the path, unit, user, argument, image, extension or kernel
	// type.
	Name string `json:"name"`
}

// String is the change as people read it: "file /etc/chrony.conf".
func (c Change) String() string { return string(c.Kind) + " " + c.Name }

// List is the change set as one list, in a fixed order (kind, then as
// given).
func (c *Changes) List() []Change {
	if c == nil {
		return nil
	}
	var out []Change
	add := func(k ChangeKind, names ...string) {
		for _, n := range names {
			if n != "" {
				out = append(out, Change{Kind: k, Name: n})
			}
		}
	}
	add(ChangeFile, c.Files...)
	add(ChangeUnit, c.Units...)
	add(ChangeSSHKeys, c.SSHKeys...)
	add(ChangeKernelArgument, c.KernelArguments...)
	add(ChangeOSImage, c.OSImage)
	add(ChangeExtension, c.Extensions...)
	add(ChangeKernelType, c.KernelType)
	return out
}

// Empty reports whether nothing changes (config names no change). It
// allocates nothing: the forecast asks it at every computation.
func (c *Changes) Empty() bool {
	if c == nil {
		return true
	}
	for _, l := range [][]string{c.Files, c.Units, c.SSHKeys, c.KernelArguments, c.Extensions} {
		for _, n := range l {
			if n != "" {
				return false
			}
		}
	}
	return c.OSImage == "" && c.KernelType == ""
}

// Summary says what changes in a few words: "2 files, 1 unit".
func (c *Changes) Summary() string {
	if c.Empty() {
		return "no change"
	}
	var parts []string
	count := func(n int, one, many string) {
		switch {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	count(len(c.Files), "file", "files")
	count(len(c.Units), "unit", "units")
	count(len(c.SSHKeys), "user's SSH keys", "users' SSH keys")
	count(len(c.KernelArguments), "kernel argument", "kernel arguments")
	if c.OSImage != "" {
		parts = append(parts, "the OS image")
	}
	count(len(c.Extensions), "extension", "extensions")
	if c.KernelType != "" {
		parts = append(parts, "the kernel type")
	}
	return strings.Join(parts, ", ")
}

// What says what a request changes, for people: "class kernel-update",
// "classes a, b", "changes (2 files)", or a class and changes.
func What(classes []string, changes *Changes) string {
	var parts []string
	switch {
	case len(classes) == 1:
		parts = append(parts, "class "+classes[0])
	case len(classes) > 1:
		parts = append(parts, "classes "+strings.Join(classes, ", "))
	}
	if !changes.Empty() {
		parts = append(parts, "changes ("+changes.Summary()+")")
	}
	return strings.Join(parts, " and ")
}

// SystemdUnitDir is where a node's unit files are written: a unit's file
// at <dir><unit>, its drop-ins at <dir><unit>.d/<name>.
const SystemdUnitDir = "/etc/systemd/system/"

// UnitOfFile is the unit whose file, or drop-in, path is; false for any
// other path.
func UnitOfFile(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, SystemdUnitDir)
	if !ok || rest == "" {
		return "", false
	}
	unit, dropin, nested := strings.Cut(rest, "/")
	if !nested {
		return unit, true
	}
	unit, ok = strings.CutSuffix(unit, ".d")
	if !ok || unit == "" || dropin == "" || strings.Contains(dropin, "/") {
		return "", false
	}
	return unit, true
}

// ChangeDecision is the rule that decided one change of a request and the
// steps it contributed.
type ChangeDecision struct {
	Kind ChangeKind `json:"kind"`
	// +kubebuilder:validation:MaxLength=1024
	Name string `json:"name"`
	// Policy whose rule decided; empty for the built-in default.
	// +optional
	Policy string `json:"policy,omitempty"`
	Rule   string `json:"rule"`
	// Steps the rule gave for this change ("RestartService chronyd.service").
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Steps []string `json:"steps,omitempty"`
}

// RuleRef names the rule that decided the change as "policy/rule" (or
// "(default)").
func (c *ChangeDecision) RuleRef() string {
	if c.Policy == "" {
		return c.Rule
	}
	return c.Policy + "/" + c.Rule
}

// Change is the change decided.
func (c *ChangeDecision) Change() Change { return Change{Kind: c.Kind, Name: c.Name} }

// NodeConfig is new content for files on nodes: what lull-agent writes for
// a NodeMaintenance whose spec.changes.config names it, under the node's
// lease, after checking that each file still has its previous content. It
// lives in the namespace lull-configs, which only maintainers may write
// and lull-agent may read, and it cannot be changed once created (make
// another). Which paths it may name is an admin's allowlist
// (lull-admission's writablePaths, docs/security.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=nc,categories=lull
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeConfigSpec `json:"spec"`
}

// NodeConfigSpec lists the files to write. The admission guard refuses a
// change to it once created (lull-nodeconfigs), and lull-agent writes none
// that was changed (generation above 1), nor a file its request's decided
// changes do not list.
type NodeConfigSpec struct {
	// Files to write or remove, each path once.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1024
	// +listType=map
	// +listMapKey=path
	Files []ConfigFile `json:"files"`
}

// ConfigFile is one file's new state and the state it must have before.
// +kubebuilder:validation:XValidation:rule="!(has(self.absent) && self.absent) || !has(self.contents)",message="a file to remove (absent: true) has no contents"
// +kubebuilder:validation:XValidation:rule="!has(self.previousMode) && !has(self.previousUser) && !has(self.previousGroup) || has(self.previous) && !(has(self.absent) && self.absent)",message="previousMode, previousUser and previousGroup are for a file that exists before (previous) and stays (not absent)"
type ConfigFile struct {
	// Path is absolute and clean: no "." or ".." segments, no "//", no
	// trailing "/".
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/([^/.\x00][^/\x00]*|[.][^/.\x00][^/\x00]*|[.][.][^/\x00]+))+$`
	Path string `json:"path"`
	// Previous is the SHA-256 (hex) of the file's content before the
	// change; empty: the file must not exist. A file whose content is
	// neither this nor the new content has drifted, and nothing is
	// written.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Previous string `json:"previous,omitempty"`
	// Absent: the file is removed.
	// +optional
	Absent bool `json:"absent,omitempty"`
	// Contents is the file's new content.
	// +optional
	Contents []byte `json:"contents,omitempty"`
	// Mode is the file's permission bits (decimal in JSON: 420 is 0644).
	// Default 0644.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4095
	Mode *int32 `json:"mode,omitempty"`
	// User and Group own the file: a name (looked up in the node's
	// /etc/passwd and /etc/group) or a numeric ID. Default root.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	User string `json:"user,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Group string `json:"group,omitempty"`
	// PreviousMode, PreviousUser and PreviousGroup are the mode and owner
	// the file has before the change, where the change gives it another
	// one (kubectl lull request --write records them from the old
	// configuration). Unset, the file must already have the new Mode,
	// User and Group, as with a NodeConfig made before these fields: a
	// file with neither its previous nor its new mode or owner has
	// drifted, and nothing is written. Only for a file that exists before
	// (Previous set) and stays (not Absent).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4095
	PreviousMode *int32 `json:"previousMode,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PreviousUser string `json:"previousUser,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PreviousGroup string `json:"previousGroup,omitempty"`
}

// NodeConfigList is a list of NodeConfig.
// +kubebuilder:object:root=true
type NodeConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeConfig `json:"items"`
}

func init() {
	register(&NodeConfig{}, &NodeConfigList{})
}
