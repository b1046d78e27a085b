package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/cli/nodeconfig"
	"lull.dev/lull/internal/plan"
)

// changeFlags plan or request from what changes between two node
// configurations (--from, --to), and for a request, carry the new files
// for lull-agent to write (--write).
type changeFlags struct {
	from, to string
	write    bool
	// set by load
	changes *lullv1alpha1.Changes
	files   []lullv1alpha1.ConfigFile
}

func (f *changeFlags) add(fs *pflag.FlagSet, request bool) {
	fs.StringVar(&f.from, "from", "", "the nodes' configuration now: an Ignition config, a MachineConfig, or a directory tree standing for / (with --to)")
	fs.StringVar(&f.to, "to", "", "the nodes' configuration after the change (with --from); the change set between the two is planned")
	if request {
		fs.BoolVar(&f.write, "write", false, "lull-agent writes the changed files itself, under the node's lease, before the plan's host steps "+
			"(a NodeConfig in "+lullv1alpha1.ConfigNamespace+"); without it something else writes them and lull plans and gates the change")
	}
}

// given reports whether a change set is asked for.
func (f *changeFlags) given() bool { return f.from != "" || f.to != "" }

// load compares the two configurations into the change set (and, for
// --write, the files to write). A configuration that cannot be read is an
// error naming the file and the fault: nothing is planned or requested
// from it (never None).
func (f *changeFlags) load() error {
	if !f.given() {
		if f.write {
			return fmt.Errorf("--write needs --from and --to: the files to write are what changes between them")
		}
		return nil
	}
	if f.from == "" || f.to == "" {
		return fmt.Errorf("give both --from (the configuration now) and --to (the configuration after the change)")
	}
	from, err := nodeconfig.Load(f.from)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := nodeconfig.Load(f.to)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	ch := nodeconfig.Diff(from, to)
	if err := nodeconfig.Check(ch); err != nil {
		return fmt.Errorf("the change from %s to %s is too large for one request: %w", f.from, f.to, err)
	}
	if ch.Empty() {
		return fmt.Errorf("%s and %s are the same configuration: nothing changes, nothing to plan", f.from, f.to)
	}
	if f.write {
		if un := nodeconfig.Unwritable(from, to); !un.Empty() {
			return fmt.Errorf("--write: lull-agent writes files and unit files, and cannot carry out %s (%s); "+
				"apply those with your own tooling and request without --write", un.Summary(), strings.Join(changeNames(un.List()), ", "))
		}
		f.files = nodeconfig.Files(from, to)
		if len(f.files) == 0 {
			return fmt.Errorf("--write: no file changes between %s and %s", f.from, f.to)
		}
		if len(f.files) > lullv1alpha1.MaxChangedFiles {
			return fmt.Errorf("--write: %d files to write, more than the %d a NodeConfig holds", len(f.files), lullv1alpha1.MaxChangedFiles)
		}
		ch.Config = configName(f.files)
	}
	f.changes = &ch
	return nil
}

func changeNames(cs []lullv1alpha1.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// configName names a NodeConfig by its content, so the same change
// requested again (for more nodes, or after an interruption) shares one.
func configName(files []lullv1alpha1.ConfigFile) string {
	b, _ := json.Marshal(files)
	sum := sha256.Sum256(b)
	return "change-" + hex.EncodeToString(sum[:])[:12]
}

// ensureConfig creates the NodeConfig the requests name, or finds the same
// one already there (a NodeConfig cannot change: another with the same
// name and other files is an error).
func (f *changeFlags) ensureConfig(ctx context.Context, c client.Client, out io.Writer) error {
	if f.changes == nil || f.changes.Config == "" {
		return nil
	}
	nc := &lullv1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: f.changes.Config, Namespace: lullv1alpha1.ConfigNamespace,
			Annotations: map[string]string{"lull.dev/from": f.from, "lull.dev/to": f.to}},
		Spec: lullv1alpha1.NodeConfigSpec{Files: f.files},
	}
	err := c.Create(ctx, nc)
	if kerrors.IsAlreadyExists(err) {
		var have lullv1alpha1.NodeConfig
		if err := c.Get(ctx, client.ObjectKeyFromObject(nc), &have); err != nil {
			return fmt.Errorf("reading NodeConfig %s/%s: %w", nc.Namespace, nc.Name, err)
		}
		if !equality.Semantic.DeepEqual(have.Spec, nc.Spec) {
			return fmt.Errorf("NodeConfig %s/%s exists with other files; delete it or rename yours", nc.Namespace, nc.Name)
		}
		fmt.Fprintf(out, "nodeconfig/%s unchanged: %s to write\n", nc.Name, files(len(nc.Spec.Files)))
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating NodeConfig %s/%s: %w", nc.Namespace, nc.Name, err)
	}
	fmt.Fprintf(out, "nodeconfig/%s created: %s to write\n", nc.Name, files(len(nc.Spec.Files)))
	return nil
}

func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// maxChangeLines bounds how many changes the human output lists; -o yaml
// lists every one.
const maxChangeLines = 40

// writeChanges says, for each change, the rule that decided it and the
// steps it contributed: once for a preview (every node decides the same
// changes with the same rules).
func writeChanges(w io.Writer, changes *lullv1alpha1.Changes, ds []lullv1alpha1.ChangeDecision) {
	if changes.Empty() {
		return
	}
	what := "Changes: " + changes.Summary()
	if changes.Config != "" {
		what += "; lull-agent writes them (NodeConfig " + lullv1alpha1.ConfigNamespace + "/" + changes.Config + ")"
	}
	fmt.Fprintf(w, "\n%s\n", what)
	for i, d := range ds {
		if i == maxChangeLines {
			fmt.Fprintf(w, "  … and %d more (-o yaml lists every change)\n", len(ds)-i)
			break
		}
		fmt.Fprintf(w, "  %s (rule %s): %s\n", d.Change(), d.RuleRef(), listOr(d.Steps, "nothing"))
	}
}

// changesOf is a preview's change decisions: every node's are the same.
func changesOf(res *plan.Result) []lullv1alpha1.ChangeDecision {
	if len(res.Nodes) == 0 {
		return nil
	}
	return res.Nodes[0].Changes
}
