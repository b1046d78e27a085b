package nodeconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"

	ignition "github.com/coreos/ignition/v2/config"
	ignerrors "github.com/coreos/ignition/v2/config/shared/errors"
	// config.Parse translates every spec version to the newest it knows;
	// these are its types (their package moves when Ignition stabilises
	// a spec: upgrade them together).
	ignlatest "github.com/coreos/ignition/v2/config/v3_6_experimental"
	igntypes "github.com/coreos/ignition/v2/config/v3_6_experimental/types"
	"github.com/vincent-petithory/dataurl"
	"sigs.k8s.io/yaml"
)

// maxFileSize bounds one file's decompressed content, so that a small
// gzip bomb in a config cannot take the reader's memory.
const maxFileSize = 64 << 20

// maxReferences bounds how deeply inline Ignition configs may refer to
// others (ignition.config.merge and replace).
const maxReferences = 8

// Load reads the node configuration at path: a directory is a tree
// standing for "/" (ReadDir); a file is an Ignition config or a
// MachineConfig, told apart by its content (Read).
func Load(path string) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return ReadDir(path)
	}
	raw, err := os.ReadFile(path) //nolint:gosec // G304: the file the user named on kubectl lull's command line, read with the user's rights
	if err != nil {
		return nil, err
	}
	return Read(path, raw)
}

// Read reads an Ignition config (JSON with an "ignition" key) or a
// MachineConfig (YAML or JSON of kind MachineConfig); name names raw in
// errors.
func Read(name string, raw []byte) (*Config, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(raw, []byte("\ufeff")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s: empty: neither an Ignition config nor a MachineConfig", name)
	}
	var probe struct {
		Ignition json.RawMessage `json:"ignition"`
		Kind     string          `json:"kind"`
		Variant  string          `json:"variant"`
	}
	isJSON := trimmed[0] == '{'
	if isJSON {
		if err := json.Unmarshal(trimmed, &probe); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %w", name, err)
		}
	} else if err := yaml.Unmarshal(trimmed, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a YAML or JSON object: %w", name, err)
	}
	switch {
	case probe.Kind == "MachineConfig":
		return ReadMachineConfig(name, trimmed)
	case probe.Ignition != nil && isJSON:
		return ReadIgnition(name, trimmed)
	case probe.Ignition != nil:
		// Ignition reads JSON only; the same document in YAML means
		// the same.
		js, err := yaml.YAMLToJSON(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s: invalid YAML: %w", name, err)
		}
		return ReadIgnition(name, js)
	case probe.Variant != "":
		return nil, fmt.Errorf("%s: a Butane config (variant %q): translate it to an Ignition config with butane first", name, probe.Variant)
	case probe.Kind != "":
		return nil, fmt.Errorf("%s: kind %q: neither an Ignition config nor a MachineConfig", name, probe.Kind)
	default:
		return nil, fmt.Errorf("%s: neither an Ignition config (no \"ignition\" key) nor a MachineConfig (no kind: MachineConfig)", name)
	}
}

// ReadIgnition reads an Ignition config (JSON) of any spec version
// Ignition accepts (3.0.0 to 3.6.0-experimental). File contents must be
// inline (data URLs, gzip-compressed or not): remote ones cannot be
// compared offline. Directories, disks, filesystems and the like are not
// compared.
func ReadIgnition(name string, raw []byte) (*Config, error) {
	cfg, err := parseIgnition(raw, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c, err := fromIgnition(name, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.normalize()
	return c, nil
}

// parseIgnition parses and validates raw as Ignition does and renders
// the configs it refers to inline, as Ignition would.
func parseIgnition(raw []byte, depth int) (igntypes.Config, error) {
	cfg, rpt, err := ignition.Parse(raw)
	if err != nil {
		switch {
		case errors.Is(err, ignerrors.ErrUnknownVersion):
			var stub struct {
				Ignition struct {
					Version string `json:"version"`
				} `json:"ignition"`
			}
			_ = json.Unmarshal(raw, &stub)
			return cfg, fmt.Errorf("Ignition spec version %q is not supported: 3.0.0 to %s are", stub.Ignition.Version, igntypes.MaxVersion) //nolint:staticcheck // ST1005: Ignition is a name
		case len(rpt.Entries) > 0:
			var lines []string
			for line := range strings.Lines(rpt.String()) {
				if line = strings.TrimSpace(line); line != "" {
					lines = append(lines, line)
				}
			}
			return cfg, fmt.Errorf("invalid Ignition config: %s", strings.Join(lines, "; "))
		default:
			return cfg, fmt.Errorf("invalid Ignition config: %w", err)
		}
	}
	return renderIgnition(cfg, depth)
}

// renderIgnition replaces cfg by, or merges into it, the configs it refers
// to, as Ignition's config fetcher does, when they are inline.
func renderIgnition(cfg igntypes.Config, depth int) (igntypes.Config, error) {
	refs := cfg.Ignition.Config
	if refs.Replace.Source == nil && len(refs.Merge) == 0 {
		return cfg, nil
	}
	if depth >= maxReferences {
		return cfg, fmt.Errorf("ignition.config: configs refer to configs more than %d deep", maxReferences)
	}
	if refs.Replace.Source != nil {
		ref, err := referencedConfig("ignition.config.replace", refs.Replace, depth)
		if err != nil {
			return cfg, err
		}
		return ref, nil
	}
	merged := cfg
	for i, r := range refs.Merge {
		ref, err := referencedConfig(fmt.Sprintf("ignition.config.merge[%d]", i), r, depth)
		if err != nil {
			return cfg, err
		}
		merged = ignlatest.Merge(merged, ref)
	}
	return merged, nil
}

func referencedConfig(field string, r igntypes.Resource, depth int) (igntypes.Config, error) {
	raw, err := fetch(field, r)
	if err != nil {
		return igntypes.Config{}, err
	}
	cfg, err := parseIgnition(raw, depth+1)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", field, err)
	}
	return cfg, nil
}

// fetch is the content of an inline (data URL) resource, decompressed.
func fetch(field string, r igntypes.Resource) ([]byte, error) {
	if r.Source == nil || *r.Source == "" {
		// Ignition creates an empty file (or leaves one there).
		return nil, nil
	}
	u, err := url.Parse(*r.Source)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid source: %w", field, err)
	}
	if u.Scheme != "data" {
		return nil, fmt.Errorf("%s from %s cannot be compared offline; inline it as a data URL", field, redact(u))
	}
	d, err := dataurl.DecodeString(*r.Source)
	if err != nil {
		return nil, fmt.Errorf("%s: invalid data URL: %w", field, err)
	}
	data := d.Data
	switch c := derefOr(r.Compression, ""); c {
	case "":
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", field, err)
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxFileSize+1))
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", field, err)
		}
	default:
		return nil, fmt.Errorf("%s: compression %q is not supported", field, c)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: more than %d MiB", field, maxFileSize>>20)
	}
	return data, nil
}

// redact is u without what may be a secret (user info, query, fragment).
func redact(u *url.URL) string {
	v := *u
	v.User, v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = nil, "", false, "", ""
	return v.String()
}

// fromIgnition is the node configuration cfg describes: its units, files,
// links, SSH keys and kernel arguments.
func fromIgnition(name string, cfg igntypes.Config) (*Config, error) {
	c := newConfig(name)
	for _, u := range cfg.Systemd.Units {
		if err := c.addIgnitionUnit(u); err != nil {
			return nil, err
		}
	}
	for _, f := range cfg.Storage.Files {
		if err := c.addIgnitionFile(f); err != nil {
			return nil, err
		}
	}
	for _, l := range cfg.Storage.Links {
		p := path.Clean(l.Path)
		link := File{Link: derefOr(l.Target, ""), Hard: derefOr(l.Hard, false), Mode: linkMode,
			User: nodeOwner(l.User.ID, l.User.Name), Group: nodeOwner(l.Group.ID, l.Group.Name)}
		if err := c.place(p, link); err != nil {
			return nil, fmt.Errorf("storage.links: %w", err)
		}
	}
	for _, u := range cfg.Passwd.Users {
		for _, k := range u.SSHAuthorizedKeys {
			c.SSHKeys[u.Name] = append(c.SSHKeys[u.Name], splitKeys(string(k))...)
		}
	}
	for _, a := range cfg.KernelArguments.ShouldExist {
		c.KernelArgumentsPresent = append(c.KernelArgumentsPresent, string(a))
	}
	for _, a := range cfg.KernelArguments.ShouldNotExist {
		c.KernelArgumentsAbsent = append(c.KernelArgumentsAbsent, string(a))
	}
	return c, nil
}

// addIgnitionUnit adds an Ignition config's systemd unit: its contents,
// whether it is enabled or masked, and its drop-ins.
func (c *Config) addIgnitionUnit(u igntypes.Unit) error {
	if !isUnitName(u.Name) {
		return fmt.Errorf("systemd.units[%s]: not a unit name", u.Name)
	}
	unit := c.unit(u.Name)
	if s := derefOr(u.Contents, ""); s != "" {
		unit.File = &File{Contents: []byte(s), Mode: defaultMode, User: rootOwner, Group: rootOwner}
	}
	if u.Enabled != nil {
		enabled := *u.Enabled
		unit.Enabled = &enabled
	}
	unit.Mask = derefOr(u.Mask, false)
	for _, d := range u.Dropins {
		if strings.ContainsRune(d.Name, '/') {
			return fmt.Errorf("systemd.units[%s].dropins[%s]: a drop-in's name has no '/'", u.Name, d.Name)
		}
		if d.Contents != nil {
			unit.Dropins[d.Name] = File{Contents: []byte(*d.Contents), Mode: defaultMode, User: rootOwner, Group: rootOwner}
		}
	}
	c.Units[u.Name] = unit
	return nil
}

// addIgnitionFile adds an Ignition config's file: its contents (inline),
// with what is appended to them, mode and owners.
func (c *Config) addIgnitionFile(f igntypes.File) error {
	p := path.Clean(f.Path)
	field := "storage.files[" + p + "]"
	contents, err := fetch(field+": contents", f.Contents)
	if err != nil {
		return err
	}
	for i, a := range f.Append {
		more, err := fetch(fmt.Sprintf("%s: append[%d]", field, i), a)
		if err != nil {
			return err
		}
		contents = append(contents, more...)
	}
	if len(contents) > maxFileSize {
		return fmt.Errorf("%s: more than %d MiB", field, maxFileSize>>20)
	}
	file := File{Contents: contents, Mode: defaultMode, User: nodeOwner(f.User.ID, f.User.Name), Group: nodeOwner(f.Group.ID, f.Group.Name)}
	if f.Mode != nil {
		file.Mode = int32(*f.Mode & 0o7777)
	}
	if err := c.place(p, file); err != nil {
		return fmt.Errorf("storage.files: %w", err)
	}
	return nil
}

// nodeOwner is an Ignition node's user or group: its ID, else its name,
// else root.
func nodeOwner(id *int, name *string) string {
	if id != nil {
		return owner(strconv.Itoa(*id))
	}
	return owner(derefOr(name, ""))
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// machineConfig is the part of an OpenShift MachineConfig
// (machineconfiguration.openshift.io/v1) that says what is on a node.
type machineConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Config          json.RawMessage `json:"config"`
		KernelArguments []string        `json:"kernelArguments"`
		OSImageURL      string          `json:"osImageURL"`
		Extensions      []string        `json:"extensions"`
		KernelType      string          `json:"kernelType"`
		FIPS            bool            `json:"fips"`
	} `json:"spec"`
}

const machineConfigGroup = "machineconfiguration.openshift.io/"

// ReadMachineConfig reads an OpenShift MachineConfig, YAML or JSON: its
// Ignition config (spec.config, read as ReadIgnition does), kernel
// arguments (each entry split as the kernel splits a command line, all in
// order), OS image, extensions, kernel type and FIPS mode.
func ReadMachineConfig(name string, raw []byte) (*Config, error) {
	var mc machineConfig
	if err := yaml.Unmarshal(raw, &mc); err != nil {
		return nil, fmt.Errorf("%s: invalid MachineConfig: %w", name, err)
	}
	if mc.Kind != "MachineConfig" {
		return nil, fmt.Errorf("%s: kind %q is not MachineConfig", name, mc.Kind)
	}
	if mc.APIVersion != "" && !strings.HasPrefix(mc.APIVersion, machineConfigGroup) {
		return nil, fmt.Errorf("%s: apiVersion %q is not %sv1", name, mc.APIVersion, machineConfigGroup)
	}
	c := newConfig(name)
	if js := bytes.TrimSpace(mc.Spec.Config); len(js) > 0 && !bytes.Equal(js, []byte("null")) {
		var err error
		if c, err = ReadIgnition(name+": spec.config", js); err != nil {
			return nil, err
		}
		c.Source = name
	}
	for _, a := range mc.Spec.KernelArguments {
		c.KernelArguments = append(c.KernelArguments, splitCmdline(a)...)
	}
	c.OSImage = mc.Spec.OSImageURL
	c.Extensions = append(c.Extensions, mc.Spec.Extensions...)
	c.KernelType = mc.Spec.KernelType
	c.FIPS = mc.Spec.FIPS
	c.normalize()
	return c, nil
}
