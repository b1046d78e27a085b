package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/liggitt/tabwriter"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// ViewGroupVersion is the apiVersion of the objects kubectl-lull prints with
// -o json|yaml|name|jsonpath|custom-columns. They are views computed on the
// client, not resources the API server serves.
var ViewGroupVersion = schema.GroupVersion{Group: "cli.lull.dev", Version: "v1alpha1"}

// Kinds of the printed views; a verb that lists prints a v1 List of them.
const (
	KindNodeLease   = "NodeLease"
	KindNodePlan    = "NodePlan"
	KindNodeStatus  = "NodeStatus"
	KindWindow      = "WindowStatus"
	KindExplanation = "SchedulingExplanation"
	KindVersion     = "Version"
)

const customColumnsPrefix = "custom-columns="

// outputFlags are -o and --no-headers of a verb that prints objects. The
// default format and "wide" are the verb's own human output; the others
// print the verb's view objects with cli-runtime's printers. Go templates
// are left out on purpose: text/template's reflection keeps every exported
// method in the binary (it grew kubectl-lull by 24 MB); jsonpath and
// custom-columns answer the same questions.
type outputFlags struct {
	output    string
	noHeaders bool
}

// humanOptions say how the default and wide formats print.
type humanOptions struct {
	wide, noHeaders bool
}

// machineFormats are the -o values printed by cli-runtime's printers; a
// value ending in '=' takes an argument.
var machineFormats = []string{"json", "yaml", "name", "jsonpath=", "jsonpath-file="}

func addOutputFlags(cmd *cobra.Command) *outputFlags {
	f := &outputFlags{}
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "output format: wide, json, yaml, name, jsonpath=..., jsonpath-file=..., custom-columns=HEADER:.path,... (default: a table for people)")
	cmd.Flags().BoolVar(&f.noHeaders, "no-headers", false, "print tables without their header rows (and without the notes below a table)")
	return f
}

func (f *outputFlags) format() string { return f.output }

// validate checks the output format before anything is read from the
// cluster, so a typo fails at once.
func (f *outputFlags) validate() error {
	switch format := f.format(); {
	case (format == "" || format == "wide"):
		return nil
	case strings.HasPrefix(format, customColumnsPrefix):
		_, err := parseCustomColumns(strings.TrimPrefix(format, customColumnsPrefix))
		return err
	}
	_, err := f.printer()
	return err
}

// printer is the cli-runtime printer for a machine format.
func (f *outputFlags) printer() (printers.ResourcePrinter, error) {
	format, arg, _ := strings.Cut(f.format(), "=")
	switch format {
	case "json":
		return &printers.JSONPrinter{}, nil
	case "yaml":
		return &printers.YAMLPrinter{}, nil
	case "name":
		return &printers.NamePrinter{}, nil
	case "jsonpath", "jsonpath-file":
		return jsonPathPrinter(format, arg)
	}
	return nil, fmt.Errorf("-o %q: unknown output format; use one of wide, %s, custom-columns=...", //nolint:revive,staticcheck // error-strings, ST1005: the "..." is custom-columns' syntax, not punctuation
		f.format(), strings.Join(machineFormats, ", "))
}

// jsonPathPrinter is -o jsonpath=TEMPLATE or jsonpath-file=FILE, as kubectl
// reads them: a missing key prints nothing rather than failing.
func jsonPathPrinter(format, arg string) (printers.ResourcePrinter, error) {
	tmpl := arg
	if format == "jsonpath-file" {
		b, err := os.ReadFile(arg) //nolint:gosec // G304: the template file the user named with -o, read with the user's rights (kubectl's own -o go-template-file does the same)
		if err != nil {
			return nil, fmt.Errorf("-o %s=%s: %w", format, arg, err)
		}
		tmpl = string(b)
	}
	if tmpl == "" {
		return nil, fmt.Errorf("-o %s= needs a template (e.g. jsonpath='{.items[*].metadata.name}')", format)
	}
	p, err := printers.NewJSONPathPrinter(tmpl)
	if err != nil {
		return nil, fmt.Errorf("-o \"%s=%s\": %w", format, arg, err)
	}
	p.AllowMissingKeys(true)
	return p, nil
}

// printObj prints obj, the verb's view, in the chosen format; human prints
// the default and wide formats.
func (f *outputFlags) printObj(w io.Writer, obj runtime.Object, human func(humanOptions) error) error {
	format := f.format()
	switch {
	case (format == "" || format == "wide"):
		return human(humanOptions{wide: format == "wide", noHeaders: f.noHeaders})
	case strings.HasPrefix(format, customColumnsPrefix):
		cols, err := parseCustomColumns(strings.TrimPrefix(format, customColumnsPrefix))
		if err != nil {
			return err
		}
		t, err := cols.table(obj)
		if err != nil {
			return err
		}
		return printTable(w, t, humanOptions{noHeaders: f.noHeaders})
	}
	p, err := f.printer()
	if err != nil {
		return err
	}
	return p.PrintObj(obj, w)
}

// viewObject is v as an object of kind with a name (if any): the JSON of v with
// apiVersion, kind and metadata.name added.
func viewObject(kind, name string, v any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", kind, name, err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", kind, name, err)
	}
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	u.SetAPIVersion(ViewGroupVersion.String())
	u.SetKind(kind)
	if name != "" {
		u.SetName(name)
	}
	return u, nil
}

// viewList is a v1 List of items, the way kubectl prints several objects.
func viewList(items []*unstructured.Unstructured) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{Object: map[string]any{}}
	l.SetAPIVersion("v1")
	l.SetKind("List")
	l.Items = make([]unstructured.Unstructured, 0, len(items))
	for _, it := range items {
		l.Items = append(l.Items, *it)
	}
	return l
}

// newTable returns a table whose columns are named by names; a name
// starting with '+' is shown only with -o wide.
func newTable(names ...string) *metav1.Table {
	t := &metav1.Table{}
	for _, n := range names {
		col := metav1.TableColumnDefinition{Name: strings.TrimPrefix(n, "+"), Type: "string"}
		if strings.HasPrefix(n, "+") {
			col.Priority = 1
		}
		t.ColumnDefinitions = append(t.ColumnDefinitions, col)
	}
	return t
}

func addRow(t *metav1.Table, cells ...any) {
	t.Rows = append(t.Rows, metav1.TableRow{Cells: cells})
}

// printTable prints t with cli-runtime's table printer, aligned as
// kubectl-lull always has (two spaces between columns).
func printTable(w io.Writer, t *metav1.Table, o humanOptions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.RememberWidths)
	if err := printers.NewTablePrinter(printers.PrintOptions{Wide: o.wide, NoHeaders: o.noHeaders}).PrintObj(t, tw); err != nil {
		return fmt.Errorf("printing table: %w", err)
	}
	return tw.Flush()
}

// customColumn is one HEADER:JSONPATH of -o custom-columns.
type customColumn struct {
	header string
	path   *jsonpath.JSONPath
}

type customColumns []customColumn

func parseCustomColumns(spec string) (customColumns, error) {
	if spec == "" {
		return nil, fmt.Errorf("-o custom-columns= needs columns: HEADER:JSONPATH,... (e.g. NODE:.metadata.name,PHASE:.phase)")
	}
	var cols customColumns
	for _, part := range strings.Split(spec, ",") {
		header, expr, ok := strings.Cut(part, ":")
		if !ok || header == "" || expr == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH (e.g. NODE:.metadata.name)", part)
		}
		expr = strings.TrimSuffix(strings.TrimPrefix(expr, "{"), "}")
		if !strings.HasPrefix(expr, ".") {
			expr = "." + expr
		}
		p := jsonpath.New(header).AllowMissingKeys(true)
		if err := p.Parse("{" + expr + "}"); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", header, err)
		}
		cols = append(cols, customColumn{header: header, path: p})
	}
	return cols, nil
}

// table evaluates the columns for obj, or for each item of a List.
func (cols customColumns) table(obj runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{}
	for _, c := range cols {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c.header, Type: "string"})
	}
	var items []map[string]any
	switch o := obj.(type) {
	case *unstructured.UnstructuredList:
		for i := range o.Items {
			items = append(items, o.Items[i].Object)
		}
	case *unstructured.Unstructured:
		items = append(items, o.Object)
	default:
		return nil, fmt.Errorf("-o custom-columns cannot print %T", obj)
	}
	for _, item := range items {
		row := metav1.TableRow{}
		for _, c := range cols {
			cell, err := c.cell(item)
			if err != nil {
				return nil, err
			}
			row.Cells = append(row.Cells, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// cell is the column's values in item joined by commas, or "<none>".
func (c customColumn) cell(item map[string]any) (string, error) {
	results, err := c.path.FindResults(item)
	if err != nil {
		return "", fmt.Errorf("-o custom-columns: column %s: %w", c.header, err)
	}
	var vals []string
	for _, rs := range results {
		for _, v := range rs {
			if v.Kind() == reflect.Interface && v.IsNil() {
				continue
			}
			vals = append(vals, cellText(v.Interface()))
		}
	}
	if len(vals) == 0 {
		return "<none>", nil
	}
	return strings.Join(vals, ","), nil
}

// cellText is a value as text: maps and lists as JSON, the rest as they
// print.
func cellText(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		if b, err := json.Marshal(v); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v)
}
