package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
)

// Files carries out a request's WriteFiles step: it writes the NodeConfig
// the request's decision names to the node (docs/changes.md, "The write
// phase"). It trusts nothing it is handed:
//
//   - the NodeConfig is read from the API server; one changed since it was
//     created (generation above 1) is refused (the guard refuses such a
//     change; one made while it was off is not trusted), and so is one
//     that is not the NodeConfig the request started with (its UID or
//     the hash of its files differ from those the decision records: it
//     was deleted and created again under the same name);
//   - every file must be among the request's decided changes (a file
//     change, or the unit file or a drop-in of a unit change), so nothing
//     the plan did not account for is written;
//   - every path must be on the admin's allowlist (writablePaths and
//     protectedPaths in the admission guard's ConfigMap, read now; a
//     ConfigMap that cannot be read refuses everything) and off
//     hostfiles.DefaultProtected;
//   - internal/hostfiles then checks drift before writing anything, journals
//     the set on the host, writes each file atomically, reads it back,
//     and restores every file on failure; should the agent die midway,
//     the next one rolls the set back (or forward, had it been verified)
//     when it starts (Agent.recoverFiles).
type Files struct {
	// Live reads the API server.
	Live client.Reader
	// HostRoot is where the host's / is mounted.
	HostRoot string
	// ConfigNamespace holds the NodeConfigs.
	ConfigNamespace string
	// Admission is the guard's ConfigMap (writablePaths, protectedPaths).
	Admission types.NamespacedName
	// Journal is where on the host a set is journaled while it is
	// written; "": hostfiles.DefaultJournal.
	Journal string
}

func (f *Files) journal() string {
	if f.Journal == "" {
		return hostfiles.DefaultJournal
	}
	return f.Journal
}

// Recover finishes a set of files an earlier agent died in the middle of
// writing: rolled back, or forward if it was written and verified
// (hostfiles.Writer.Recover). It returns nil, nil when there was none.
func (f *Files) Recover() (*hostfiles.Recovery, error) {
	w := &hostfiles.Writer{Root: f.HostRoot, Journal: f.journal()}
	return w.Recover()
}

// Write writes the request's NodeConfig and returns what was written.
func (f *Files) Write(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (string, error) {
	d := nm.Status.Decision
	if d == nil || d.Config == "" {
		return "", fmt.Errorf("the request's decision names no NodeConfig to write")
	}
	var nc lullv1alpha1.NodeConfig
	key := types.NamespacedName{Namespace: f.ConfigNamespace, Name: d.Config}
	if err := f.Live.Get(ctx, key, &nc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("NodeConfig %s not found: nothing written", key)
		}
		return "", fmt.Errorf("reading NodeConfig %s: %w", key, err)
	}
	if nc.Generation > 1 {
		return "", fmt.Errorf("NodeConfig %s was changed after it was created (generation %d): the plan was not decided from what it holds now; nothing written", key, nc.Generation)
	}
	if err := samePlanned(d, &nc); err != nil {
		return "", fmt.Errorf("drift: NodeConfig %s is not the one the request was planned from: %w; nothing written", key, err)
	}
	if unplanned := notPlanned(d, nc.Spec.Files); len(unplanned) > 0 {
		return "", fmt.Errorf("NodeConfig %s names %s, which the request's changes do not list, so its plan did not account for it; nothing written",
			key, strings.Join(unplanned, ", "))
	}
	writable, protected, err := f.allowlist(ctx)
	if err != nil {
		return "", err
	}
	w := &hostfiles.Writer{Root: f.HostRoot, Writable: writable, Protected: append(append([]string{}, hostfiles.DefaultProtected...), protected...),
		Journal: f.journal()}
	res, err := w.Apply(nc.Spec.Files)
	if err != nil {
		var drift *hostfiles.DriftError
		if errors.As(err, &drift) {
			return "", fmt.Errorf("drift: %w; nothing written (the files were changed since the configuration the request was planned from)", err)
		}
		return res.Summary(), err
	}
	return res.Summary(), nil
}

// recoverFiles finishes, once per process and before any step, a set of
// files an earlier agent died in the middle of writing. Until it succeeds
// no step runs: a reboot or a restart must not act on half a set.
func (a *Agent) recoverFiles(logger klog.Logger) error {
	if a.Files == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.filesRecovered {
		return nil
	}
	rec, err := a.Files.Recover()
	if err != nil {
		return fmt.Errorf("finishing the WriteFiles an earlier lull-agent left unfinished: %w; no step runs until it is", err)
	}
	if rec != nil {
		logger.Info("Finished the WriteFiles an earlier lull-agent left unfinished", "outcome", rec.State, "files", rec.Files, "set", rec.ID)
		for _, w := range rec.Warnings {
			logger.Info("Warning: left behind by the unfinished WriteFiles", "warning", w)
		}
	}
	a.filesRecovered, a.recovered = true, rec
	return nil
}

// resumedPrefix begins the message of a WriteFiles step a new lull-agent
// resumed (resumedWrite).
const resumedPrefix = "resumed by a new lull-agent"

// resumedWrite is what a WriteFiles step this process resumes records of
// the set an earlier agent left: what recovery made of it, and whether it
// rolled a verified set forward (the files are all new).
func (a *Agent) resumedWrite() (msg string, rolledForward bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recovered == nil {
		return resumedPrefix + " (no unfinished set was on the node)", false
	}
	return fmt.Sprintf("%s, which found set %s unfinished: %s (%s)", resumedPrefix,
		a.recovered.ID, a.recovered.State, strings.Join(a.recovered.Files, ", ")), a.recovered.State == hostfiles.JournalRolledForward
}

// writeFiles runs a WriteFiles step with the agent's Files.
func (a *Agent) writeFiles(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (string, error) {
	if a.Files == nil {
		return "", fmt.Errorf("this lull-agent writes no files (it runs without a writable host root)")
	}
	return a.Files.Write(ctx, nm)
}

// samePlanned compares the NodeConfig with the one the decision records
// (Decision.ConfigUID and ConfigSHA256, set by the drainer when the
// request started). A request whose decision records no UID was started
// by a drainer that did not record it: its NodeConfig is known by name
// and generation alone, as before, and is taken as it is.
func samePlanned(d *lullv1alpha1.Decision, nc *lullv1alpha1.NodeConfig) error {
	if d.ConfigUID == "" {
		return nil
	}
	var diffs []string
	if nc.UID != d.ConfigUID {
		diffs = append(diffs, fmt.Sprintf("UID %s, not %s (it was deleted and created again since the request started)", nc.UID, d.ConfigUID))
	}
	if sum := hostfiles.ConfigSHA256(nc.Spec.Files); sum != d.ConfigSHA256 {
		diffs = append(diffs, fmt.Sprintf("files sha256 %s, not %s", sum, d.ConfigSHA256))
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.New(strings.Join(diffs, "; "))
}

// notPlanned are the NodeConfig's paths that no decided change covers.
func notPlanned(d *lullv1alpha1.Decision, files []lullv1alpha1.ConfigFile) []string {
	planned := map[lullv1alpha1.Change]bool{}
	for _, c := range d.Changes {
		planned[c.Change()] = true
	}
	var out []string
	for _, f := range files {
		// A unit's file or drop-in is planned only as a change of its
		// unit: declared as a plain file it would be written without the
		// drain a unit write needs (internal/policy).
		unit, isUnit := lullv1alpha1.UnitOfFile(f.Path)
		if !isUnit && planned[lullv1alpha1.Change{Kind: lullv1alpha1.ChangeFile, Name: f.Path}] ||
			isUnit && planned[lullv1alpha1.Change{Kind: lullv1alpha1.ChangeUnit, Name: unit}] {
			continue
		}
		out = append(out, f.Path)
	}
	return out
}

// allowlist reads writablePaths and protectedPaths from the admission
// guard's ConfigMap, the lists the guard refuses NodeConfigs by; without
// it nothing is written (fail closed, as the guard does).
func (f *Files) allowlist(ctx context.Context) (writable, protected []string, err error) {
	var cm corev1.ConfigMap
	if err := f.Live.Get(ctx, f.Admission, &cm); err != nil {
		return nil, nil, fmt.Errorf("reading the writable and protected paths (ConfigMap %s): %w; nothing written", f.Admission, err)
	}
	writable, protected = globList(cm.Data["writablePaths"]), globList(cm.Data["protectedPaths"])
	if len(writable) == 0 {
		return nil, nil, fmt.Errorf("ConfigMap %s sets no writablePaths: lull-agent writes nothing", f.Admission)
	}
	return writable, protected, nil
}

func globList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
