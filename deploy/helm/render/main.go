// Command render renders the templates of a Helm chart the way `helm template`
// does, using Go's own text/template and a Helm/Sprig-compatible subset of
// template functions.
//
// It exists because the project's tests must check the chart's output on
// machines where no `helm` binary can be installed. It deliberately depends on
// nothing but the Go standard library, which has no YAML parser; therefore the
// chart's default values are not read from values.yaml but are passed in by the
// caller as JSON (the first -values file), followed by any user overrides:
//
//	render -chart DIR [-values FILE.json]... [-name RELEASE] [-namespace NS] [-upgrade]
//
// On success the rendered manifests are written to stdout, each preceded by
// `---` and a `# Source:` comment, like `helm template`. On any error nothing is
// written to stdout, the error goes to stderr prefixed with "render: " and the
// exit status is 1; usage errors exit with status 2.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"unicode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// stringList is a repeatable command-line flag; the order of the occurrences is
// kept because later values files override earlier ones.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// options holds everything the command line controls.
type options struct {
	chartDir    string
	valuesFiles []string
	releaseName string
	namespace   string
	upgrade     bool
}

// run is the whole program minus the process exit, so that tests can drive it.
// It returns the exit status: 0 on success, 1 on a rendering error, 2 on a
// usage error.
func run(args []string, stdout, stderr io.Writer) int {
	var opts options
	var values stringList
	fset := flag.NewFlagSet("render", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&opts.chartDir, "chart", "", "`DIR` of the Helm chart (Chart.yaml, templates/)")
	fset.Var(&values, "values", "JSON values `FILE`; repeatable. The first holds the chart's defaults, later ones override them")
	fset.StringVar(&opts.releaseName, "name", "gatehouse", "release `NAME` (.Release.Name)")
	fset.StringVar(&opts.namespace, "namespace", "default", "release `NAMESPACE` (.Release.Namespace)")
	fset.BoolVar(&opts.upgrade, "upgrade", false, "render as an upgrade (.Release.IsUpgrade, revision 2) instead of an install")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: render -chart DIR [-values FILE.json]... [-name RELEASE] [-namespace NS] [-upgrade]")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	opts.valuesFiles = values
	switch {
	case fset.NArg() > 0:
		fmt.Fprintf(stderr, "render: unexpected argument %q\n", fset.Arg(0))
		fset.Usage()
		return 2
	case opts.chartDir == "":
		fmt.Fprintln(stderr, "render: -chart is required")
		fset.Usage()
		return 2
	case len(opts.valuesFiles) == 0:
		// Without the defaults every .Values lookup would silently render
		// as empty, which would make a forgotten argument look like a
		// chart bug; insist on at least the defaults file.
		fmt.Fprintln(stderr, "render: at least one -values file (the chart's defaults as JSON) is required")
		fset.Usage()
		return 2
	}

	// Everything is rendered into a buffer first so that a failure in the
	// last template leaves stdout untouched.
	var out bytes.Buffer
	if err := render(opts, &out); err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "render: %v\n", err)
		return 1
	}
	return 0
}

// chartMetadata mirrors the fields of Helm's chart.Metadata that can be read
// from the top-level scalars of Chart.yaml. Helm exposes .Chart as a struct
// (not a map), so a misspelt field is an execution error here as it is there.
type chartMetadata struct {
	Name        string
	Version     string
	AppVersion  string
	Description string
	Type        string
	// APIVersion is the name Helm itself uses for `apiVersion`.
	APIVersion string
}

// templateFile is one file found under templates/.
type templateFile struct {
	name string // "CHARTNAME/templates/REL/PATH", as Helm names templates
	text string
}

// render produces the complete `helm template`-like output for opts into w.
func render(opts options, w io.Writer) error {
	meta, err := readChartYAML(filepath.Join(opts.chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	values, err := loadValues(opts.valuesFiles)
	if err != nil {
		return err
	}
	files, err := readTemplates(opts.chartDir, meta.Name)
	if err != nil {
		return err
	}

	tmpl, err := parseTemplates(files)
	if err != nil {
		return err
	}

	revision := 1
	if opts.upgrade {
		revision = 2
	}
	basePath := meta.Name + "/templates"
	// The top-level object and .Release/.Template are maps, as in Helm
	// (chartutil.Values); .Chart is a struct, as in Helm.
	top := map[string]interface{}{
		"Values": values,
		"Chart":  meta,
		"Release": map[string]interface{}{
			"Name":      opts.releaseName,
			"Namespace": opts.namespace,
			"Service":   "Helm",
			"IsInstall": !opts.upgrade,
			"IsUpgrade": opts.upgrade,
			"Revision":  revision,
		},
	}

	// Output is in lexical order of the template paths.
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	for _, f := range files {
		base := path.Base(f.name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		top["Template"] = map[string]interface{}{"Name": f.name, "BasePath": basePath}
		var buf strings.Builder
		if err := tmpl.ExecuteTemplate(&buf, f.name, top); err != nil {
			return err
		}
		// Helm, when not in strict mode, erases the "<no value>" that
		// text/template prints for missing keys under missingkey=zero.
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		text = strings.TrimRightFunc(text, unicode.IsSpace)
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(w, "---\n# Source: %s\n%s\n", f.name, text)
	}
	return nil
}

// parseTemplates parses all files into one template set, so that templates
// `define`d in one file (typically _helpers.tpl) can be used from any other.
//
// Files are parsed in the order Helm uses (deepest paths first, then reverse
// lexical order) because, when two files define the same name, the one parsed
// last wins; this keeps that choice identical to Helm's.
func parseTemplates(files []templateFile) (*template.Template, error) {
	order := make([]templateFile, len(files))
	copy(order, files)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].name, order[j].name
		ca, cb := strings.Count(a, "/"), strings.Count(b, "/")
		if ca != cb {
			return ca > cb
		}
		return a > b
	})

	root := template.New("gotpl").Option("missingkey=zero")
	root.Funcs(funcMap(root))
	for _, f := range order {
		if _, err := root.New(f.name).Parse(f.text); err != nil {
			return nil, err
		}
	}
	return root, nil
}

// templateExtensions lists the file name endings that are read from
// templates/; anything else (editor backups, README files) is ignored.
var templateExtensions = []string{".yaml", ".yml", ".tpl", ".txt"}

// readTemplates reads every template file below DIR/templates, recursively,
// naming each "CHARTNAME/templates/REL/PATH" with forward slashes. A chart
// without a templates directory simply has no templates.
func readTemplates(chartDir, chartName string) ([]templateFile, error) {
	dir := filepath.Join(chartDir, "templates")
	var files []templateFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || !hasTemplateExtension(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, templateFile{
			name: chartName + "/templates/" + filepath.ToSlash(rel),
			text: string(data),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

func hasTemplateExtension(name string) bool {
	for _, ext := range templateExtensions {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// readChartYAML reads the chart metadata. Without a YAML parser only the
// top-level `key: value` scalar lines are understood; that is all the
// templates need (.Chart.Name, .Chart.Version, ...). Nested lines, list items,
// comments and block scalars are ignored.
func readChartYAML(file string) (*chartMetadata, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	fields := parseTopLevelScalars(string(data))
	meta := &chartMetadata{
		Name:        fields["name"],
		Version:     fields["version"],
		AppVersion:  fields["appVersion"],
		Description: fields["description"],
		Type:        fields["type"],
		APIVersion:  fields["apiVersion"],
	}
	if meta.Name == "" {
		return nil, fmt.Errorf("%s: no chart name", file)
	}
	return meta, nil
}

// parseTopLevelScalars returns the unindented `key: value` pairs of a simple
// YAML document, with surrounding quotes removed from the values.
func parseTopLevelScalars(text string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.ContainsRune(" \t#-.", rune(line[0])) {
			// Blank, nested, comment, list item or document marker.
			continue
		}
		colon := strings.Index(line, ":")
		if colon <= 0 || (colon+1 < len(line) && line[colon+1] != ' ' && line[colon+1] != '\t') {
			continue
		}
		key := unquoteScalar(strings.TrimSpace(line[:colon]))
		fields[key] = unquoteScalar(strings.TrimSpace(line[colon+1:]))
	}
	return fields
}

// unquoteScalar turns a one-line YAML scalar into its string value: quoted
// scalars lose their quotes (and escapes), plain ones lose a trailing comment.
// Flow collections and block scalar headers yield "" since they are not
// understood.
func unquoteScalar(s string) string {
	if s == "" {
		return ""
	}
	switch s[0] {
	case '"':
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				if u, err := strconv.Unquote(s[:i+1]); err == nil {
					return u
				}
				return s[1:i]
			}
		}
		return strings.TrimPrefix(s, `"`)
	case '\'':
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			b.WriteByte(s[i])
		}
		return b.String()
	case '|', '>', '[', '{', '&', '*', '!':
		return ""
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "\t#"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// loadValues reads the JSON values files and coalesces them: the first file
// (the chart's defaults) is taken as is, each later file is merged over the
// result with mergeValues.
func loadValues(files []string) (map[string]interface{}, error) {
	values := map[string]interface{}{}
	for i, file := range files {
		v, err := readJSONObject(file)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			values = v
			continue
		}
		values = mergeValues(values, v)
	}
	return values, nil
}

// readJSONObject decodes a file holding one JSON object. Numbers become
// float64, exactly as they do in Helm, which converts YAML to JSON and decodes
// it with encoding/json. A file holding just `null` counts as an empty object,
// like an empty values.yaml.
func readJSONObject(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v interface{}
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: unexpected data after the top-level value", file)
	}
	switch v := v.(type) {
	case nil:
		return map[string]interface{}{}, nil
	case map[string]interface{}:
		return v, nil
	default:
		return nil, fmt.Errorf("%s: values must be a JSON object, not %T", file, v)
	}
}

// mergeValues returns base overridden by over, following Helm's coalescing
// rules: maps merge recursively, any other value (scalar or list) in over
// replaces the one in base, and a null in over deletes the key. Neither input
// is modified.
func mergeValues(base, over map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		if om, ok := v.(map[string]interface{}); ok {
			// A new map is merged into an empty one so that its own
			// nulls are dropped too.
			bm, _ := out[k].(map[string]interface{})
			out[k] = mergeValues(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}
