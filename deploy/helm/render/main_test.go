package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// chart describes a throw-away chart for one test: template files by path
// relative to templates/, and the JSON values files in order.
type chart struct {
	chartYAML string
	templates map[string]string
	values    []string
}

// write creates the chart in a fresh temporary directory and returns the
// arguments that select it and its values files.
func (c chart) write(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	chartYAML := c.chartYAML
	if chartYAML == "" {
		chartYAML = "apiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: \"1.0\"\n"
	}
	mustWrite(t, filepath.Join(dir, "Chart.yaml"), chartYAML)
	for name, text := range c.templates {
		mustWrite(t, filepath.Join(dir, "templates", filepath.FromSlash(name)), text)
	}
	values := c.values
	if len(values) == 0 {
		values = []string{`{}`}
	}
	args := []string{"-chart", dir}
	for i, v := range values {
		file := filepath.Join(dir, "values"+string(rune('0'+i))+".json")
		mustWrite(t, file, v)
		args = append(args, "-values", file)
	}
	return args
}

func mustWrite(t *testing.T, file, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runRender runs the program and returns its stdout, stderr and exit status.
func runRender(args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// mustRender renders c and fails the test unless that succeeds.
func mustRender(t *testing.T, c chart, extra ...string) string {
	t.Helper()
	stdout, stderr, code := runRender(append(c.write(t), extra...)...)
	if code != 0 {
		t.Fatalf("exit status %d, stderr: %s", code, stderr)
	}
	if stderr != "" {
		t.Errorf("unexpected stderr: %s", stderr)
	}
	return stdout
}

// mustFail renders c, expects exit status 1 with nothing on stdout, and
// returns stderr.
func mustFail(t *testing.T, c chart) string {
	t.Helper()
	stdout, stderr, code := runRender(c.write(t)...)
	if code != 1 {
		t.Fatalf("exit status %d, want 1; stdout: %s stderr: %s", code, stdout, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout should be empty on error, got: %q", stdout)
	}
	if !strings.HasPrefix(stderr, "render: ") {
		t.Errorf("stderr should start with %q, got: %q", "render: ", stderr)
	}
	return stderr
}

// execute runs a one-off template with the program's functions, for testing
// the functions without building a chart.
func execute(t *testing.T, text string, data interface{}) string {
	t.Helper()
	tmpl, err := parseTemplates([]templateFile{{name: "t", text: text}})
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	var b strings.Builder
	if err := tmpl.ExecuteTemplate(&b, "t", data); err != nil {
		t.Fatalf("execute %q: %v", text, err)
	}
	return b.String()
}

func TestDefinesSharedAcrossFilesWithInclude(t *testing.T) {
	out := mustRender(t, chart{
		templates: map[string]string{
			"_helpers.tpl": `{{- define "demo.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "demo.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}`,
			"deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "demo.fullname" . }}
  labels:
    {{- include "demo.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicas }}
`,
			"service.yaml": `kind: Service
metadata:
  name: {{ include "demo.fullname" . }}
  labels: {{- include "demo.labels" . | nindent 4 }}
`,
		},
		values: []string{`{"replicas": 3}`},
	}, "-name", "web")
	want := `---
# Source: demo/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-demo
  labels:
    app.kubernetes.io/name: demo
    app.kubernetes.io/instance: web
spec:
  replicas: 3
---
# Source: demo/templates/service.yaml
kind: Service
metadata:
  name: web-demo
  labels:
    app.kubernetes.io/name: demo
    app.kubernetes.io/instance: web
`
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestIncludeRecursion(t *testing.T) {
	out := mustRender(t, chart{
		templates: map[string]string{
			"_walk.tpl": `{{- define "walk" -}}
{{ .name }}{{ if .child }}/{{ include "walk" .child }}{{ end }}
{{- end -}}`,
			"path.txt": `path: {{ include "walk" .Values.tree }}`,
		},
		values: []string{`{"tree": {"name": "a", "child": {"name": "b", "child": {"name": "c"}}}}`},
	})
	if want := "---\n# Source: demo/templates/path.txt\npath: a/b/c\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}

	// Unbounded recursion is an error, not a crash.
	stderr := mustFail(t, chart{templates: map[string]string{
		"loop.yaml": `{{ define "loop" }}{{ include "loop" . }}{{ end }}{{ include "loop" . }}`,
	}})
	if !strings.Contains(stderr, "nested reference name: loop") {
		t.Errorf("stderr: %s", stderr)
	}
}

func TestRequiredFailsWithMessageAndNoOutput(t *testing.T) {
	stderr := mustFail(t, chart{
		templates: map[string]string{
			// Renders fine, but must not be printed since a later
			// template fails.
			"a.yaml": "kind: ConfigMap\n",
			"b.yaml": `host: {{ required "ingress.host is required" .Values.ingress.host }}`,
		},
		values: []string{`{"ingress": {"host": ""}}`},
	})
	if !strings.Contains(stderr, "ingress.host is required") {
		t.Errorf("stderr does not carry the message: %s", stderr)
	}

	// A present, non-empty value passes through; 0 and false count as set.
	out := mustRender(t, chart{
		templates: map[string]string{
			"a.yaml": `{{ required "m" .Values.h }} {{ required "m" .Values.z }} {{ required "m" .Values.f }}`,
		},
		values: []string{`{"h": "x", "z": 0, "f": false}`},
	})
	if !strings.HasSuffix(out, "\nx 0 false\n") {
		t.Errorf("got %q", out)
	}

	// A missing key (nil) fails too, and so does fail.
	if stderr := mustFail(t, chart{templates: map[string]string{
		"a.yaml": `{{ required "need x" .Values.x }}`,
	}}); !strings.Contains(stderr, "need x") {
		t.Errorf("stderr: %s", stderr)
	}
	if stderr := mustFail(t, chart{templates: map[string]string{
		"a.yaml": `{{ if true }}{{ fail "unsupported mode" }}{{ end }}`,
	}}); !strings.Contains(stderr, "unsupported mode") {
		t.Errorf("stderr: %s", stderr)
	}
}

func TestUnknownFunctionFailsAtParseTime(t *testing.T) {
	// The function sits in a partial that is never executed and behind a
	// false condition: only parsing can catch it.
	stderr := mustFail(t, chart{templates: map[string]string{
		"_helpers.tpl": `{{ define "x" }}{{ if false }}{{ tpl "a" . }}{{ end }}{{ end }}`,
		"a.yaml":       "kind: A\n",
	}})
	if !strings.Contains(stderr, `function "tpl" not defined`) {
		t.Errorf("stderr should name the function: %s", stderr)
	}
	// A plain syntax error is reported too.
	if stderr := mustFail(t, chart{templates: map[string]string{"a.yaml": "{{ if }}"}}); !strings.Contains(stderr, "demo/templates/a.yaml") {
		t.Errorf("stderr should name the file: %s", stderr)
	}
}

func TestValuesMerge(t *testing.T) {
	out := mustRender(t, chart{
		templates: map[string]string{"values.txt": `{{ toJson .Values }}`},
		values: []string{
			`{"image": {"repository": "gatehouse", "tag": "1.0", "pull": {"policy": "IfNotPresent", "secrets": ["a"]}},
			  "ports": [80, 443], "debug": true, "removed": {"x": 1}, "kept": null}`,
			`{"image": {"tag": "2.0", "pull": {"secrets": ["b", "c"]}}, "ports": [8080], "removed": null,
			  "added": {"a": 1, "gone": null}}`,
			`{"debug": false, "image": {"repository": null}}`,
		},
	})
	got := strings.TrimPrefix(out, "---\n# Source: demo/templates/values.txt\n")
	var v map[string]interface{}
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	want := map[string]interface{}{
		"image": map[string]interface{}{
			"tag":  "2.0",
			"pull": map[string]interface{}{"policy": "IfNotPresent", "secrets": []interface{}{"b", "c"}},
		},
		"ports": []interface{}{8080.0},
		"debug": false,
		"kept":  nil, // a null among the defaults stays
		"added": map[string]interface{}{"a": 1.0},
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("merged values:\n got %v\nwant %v", v, want)
	}
}

func TestMergeValuesLeavesInputsAlone(t *testing.T) {
	base := map[string]interface{}{"a": map[string]interface{}{"b": 1.0, "c": 2.0}}
	over := map[string]interface{}{"a": map[string]interface{}{"b": nil, "d": 3.0}}
	got := mergeValues(base, over)
	want := map[string]interface{}{"a": map[string]interface{}{"c": 2.0, "d": 3.0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if !reflect.DeepEqual(base, map[string]interface{}{"a": map[string]interface{}{"b": 1.0, "c": 2.0}}) {
		t.Errorf("base was modified: %v", base)
	}
	if !reflect.DeepEqual(over, map[string]interface{}{"a": map[string]interface{}{"b": nil, "d": 3.0}}) {
		t.Errorf("override was modified: %v", over)
	}
}

func TestMissingKeysRenderEmpty(t *testing.T) {
	out := mustRender(t, chart{
		templates: map[string]string{
			"a.yaml": `a: [{{ .Values.nope }}] b: [{{ .Values.obj.nope }}] c: [{{ .Release.Nope }}] d: [{{ .Template.Nope }}]`,
		},
		values: []string{`{"obj": {}}`},
	})
	if want := "a: [] b: [] c: [] d: []\n"; !strings.HasSuffix(out, "\n"+want) {
		t.Errorf("got %q, want suffix %q", out, want)
	}
	// Going through a missing map is still an error, as in Helm.
	if stderr := mustFail(t, chart{templates: map[string]string{
		"a.yaml": `{{ .Values.nope.deeper }}`,
	}}); !strings.Contains(stderr, "nil pointer") {
		t.Errorf("stderr: %s", stderr)
	}
	// A misspelt .Chart field is an error: .Chart is a struct, as in Helm.
	if stderr := mustFail(t, chart{templates: map[string]string{
		"a.yaml": `{{ .Chart.Nmae }}`,
	}}); !strings.Contains(stderr, "Nmae") {
		t.Errorf("stderr: %s", stderr)
	}
}

func TestWhitespaceOnlyOutputIsOmitted(t *testing.T) {
	c := chart{
		templates: map[string]string{
			"ingress.yaml": "\n{{ if .Values.ingress.enabled }}\nkind: Ingress\n{{ end }}\n  \n\t\n",
			"empty.yaml":   "",
			"novalue.yaml": "{{ .Values.nothing }}\n",
		},
		values: []string{`{"ingress": {"enabled": false}}`},
	}
	if out := mustRender(t, c); out != "" {
		t.Errorf("expected no output, got %q", out)
	}
	c.values = append(c.values, `{"ingress": {"enabled": true}}`)
	// Leading whitespace is kept, trailing whitespace trimmed.
	want := "---\n# Source: demo/templates/ingress.yaml\n\n\nkind: Ingress\n"
	if out := mustRender(t, c); out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestPartialsAndNotesAreNotRendered(t *testing.T) {
	out := mustRender(t, chart{
		templates: map[string]string{
			"_helpers.tpl":            `{{ define "x" }}from-helper{{ end }}partial-text`,
			"_partial.yaml":           "kind: Partial\n",
			"NOTES.txt":               "Thank you for installing {{ .Chart.Name }}.\n",
			"sub/_nested.tpl":         `{{ define "y" }}from-nested{{ end }}`,
			"sub/dir/config.yaml":     `{{ include "x" . }} {{ include "y" . }} {{ .Template.Name }} {{ .Template.BasePath }}`,
			"z.yaml":                  "kind: Z\n",
			"README.md":               "not a template {{ nosuchfunc }}",
			"sub/dir/notes.yaml.orig": "ignored",
		},
	})
	want := `---
# Source: demo/templates/sub/dir/config.yaml
from-helper from-nested demo/templates/sub/dir/config.yaml demo/templates
---
# Source: demo/templates/z.yaml
kind: Z
`
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestReleaseObject(t *testing.T) {
	c := chart{templates: map[string]string{
		"r.yaml": `{{ .Release.Name }} {{ .Release.Namespace }} {{ .Release.Service }} install={{ .Release.IsInstall }} upgrade={{ .Release.IsUpgrade }} rev={{ .Release.Revision }}`,
	}}
	if out := mustRender(t, c); !strings.HasSuffix(out, "\ngatehouse default Helm install=true upgrade=false rev=1\n") {
		t.Errorf("install: %q", out)
	}
	if out := mustRender(t, c, "-upgrade", "-name", "gh", "-namespace", "edge"); !strings.HasSuffix(out, "\ngh edge Helm install=false upgrade=true rev=2\n") {
		t.Errorf("upgrade: %q", out)
	}
}

func TestChartObject(t *testing.T) {
	out := mustRender(t, chart{
		chartYAML: `# A comment
apiVersion: v2
name: gatehouse   # trailing comment
description: 'It''s a "gate"'
type: "application"
version: 1.2.3
appVersion: "0.9.0"
keywords:
  - name: nested
    version: 9.9.9
- name: list-item
dependencies: []
`,
		templates: map[string]string{
			"c.yaml": `{{ .Chart.Name }}|{{ .Chart.Version }}|{{ .Chart.AppVersion }}|{{ .Chart.Description }}|{{ .Chart.Type }}|{{ .Chart.APIVersion }}`,
		},
	})
	want := "---\n# Source: gatehouse/templates/c.yaml\ngatehouse|1.2.3|0.9.0|It's a \"gate\"|application|v2\n"
	if out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"-values", "x.json"},
		{"-chart", dir},
		{"-chart", dir, "-values", "x.json", "extra"},
		{"-nosuchflag"},
	} {
		stdout, stderr, code := runRender(args...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// Bad input files are errors (status 1), not usage errors.
	args := chart{templates: map[string]string{"a.yaml": "a"}, values: []string{`[1]`}}.write(t)
	if _, stderr, code := runRender(args...); code != 1 || !strings.Contains(stderr, "JSON object") {
		t.Errorf("non-object values: exit %d, %s", code, stderr)
	}
	if _, _, code := runRender("-chart", dir, "-values", filepath.Join(dir, "missing.json")); code != 1 {
		t.Errorf("missing chart: exit %d", code)
	}
}

func TestToYamlNested(t *testing.T) {
	values := `{
	  "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {}},
	  "env": [{"name": "RUST_LOG", "value": "info"}, {"name": "PORT", "value": "8080"}],
	  "args": ["--listen", "0.0.0.0:8080"],
	  "matrix": [[1, 2], [], [{"a": null}]],
	  "flags": {"on": true, "off": false, "ratio": 0.25, "big": 9007199254740992, "text": "line1\nline2"},
	  "tolerations": []
	}`
	out := mustRender(t, chart{
		templates: map[string]string{
			"y.yaml": "spec:\n  {{- toYaml .Values | nindent 2 }}\nempty: {{ toYaml .Values.flags.missing }}\ns: {{ toYaml \"yes\" }}",
		},
		values: []string{values},
	})
	want := `---
# Source: demo/templates/y.yaml
spec:
  args:
  - --listen
  - "0.0.0.0:8080"
  env:
  - name: RUST_LOG
    value: info
  - name: PORT
    value: "8080"
  flags:
    big: 9007199254740992
    "off": false
    "on": true
    ratio: 0.25
    text: "line1\nline2"
  matrix:
  - - 1
    - 2
  - []
  - - a: null
  resources:
    limits:
      cpu: 500m
      memory: 128Mi
    requests: {}
  tolerations: []
empty: null
s: "yes"
`
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestToYamlOfTemplateBuiltValues(t *testing.T) {
	// Values built in templates (ints, []string, nested dicts) go through
	// JSON first, as in Helm.
	got := execute(t, `{{ toYaml (dict "n" 3 "l" (keys (dict "b" 1 "a" 2)) "d" (dict "k" (list 1 "x" nil))) }}`, nil)
	// "n" is a YAML 1.1 boolean, so even as a key it is quoted.
	want := "d:\n  k:\n  - 1\n  - x\n  - null\nl:\n- a\n- b\n\"n\": 3"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := toYAML(func() {}); got != "" {
		t.Errorf("unencodable value: got %q, want empty", got)
	}
}

func TestYAMLStringQuoting(t *testing.T) {
	mustQuote := []string{
		"yes", "No", "YES", "on", "Off", "y", "N", "true", "False", "null", "NULL", "~",
		"1e3", "0755", "0x1F", "0o17", "0b101", ".5", "+1", "-1", "1_000", "12:30",
		"2001-12-14", "2001-12-14t21", "1.2.3", "30d", "1E3", "0xABp1", "0.0.0.0", ".inf", "-.inf", ".NaN", "nan", "Inf", "-inf",
		"-", "--", "---", "--1", "...", ".", "- a", "-_x", ": x", "a: b", "a:b", "#c", "a #c",
		"@x", "`x", "*a", "&a", "!t", "%p", "?q", "|", ">", "[", "]", "{", "}", ",",
		"'", `"`, "<<", "=", "", " lead", "trail ", "two words", "a\nb", "tab\t",
		"café", "\u0085", "\u2028", "\ufeff", "\x7f", "\x00",
	}
	for _, s := range mustQuote {
		got := yamlString(s)
		if !strings.HasPrefix(got, `"`) {
			t.Errorf("%q should be quoted, got %s", s, got)
			continue
		}
		// The quoted form is also valid JSON; it must decode to s.
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != s {
			t.Errorf("%q: %s decodes to %q (%v)", s, got, back, err)
		}
	}
	for _, s := range []string{"500m", "128Mi", "1Gi", "10s", "1m30s", "3rd", "nginx", "gatehouse-web", "a/b", "/abs/path", "foo.bar", "_x", "-a", "--listen", "Yesterday", "none", "v1.2.3", "IfNotPresent", "yes-please"} {
		if got := yamlString(s); got != s {
			t.Errorf("%q should be plain, got %s", s, got)
		}
	}
	// Escapes are ones YAML 1.1, YAML 1.2 and JSON share.
	if got, want := yamlString("q\"b\\\u0001\r\u0085é"), `"q\"b\\\u0001\r\u0085é"`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	// Keys follow the same rule.
	if got, want := toYAML(map[string]interface{}{"yes": "no", "a b": "c"}), "\"a b\": c\n\"yes\": \"no\""; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestYAMLNumbers(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{3, "3"}, {-3, "-3"}, {0, "0"}, {1.5, "1.5"}, {0.1, "0.1"},
		{9007199254740992, "9007199254740992"}, {-9007199254740992, "-9007199254740992"},
		{1e21, "1.0e+21"}, {1e-7, "1.0e-07"}, {1.25e-7, "1.25e-07"},
	} {
		if got := yamlFloat(tc.in); got != tc.want {
			t.Errorf("yamlFloat(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
	// Through toYaml, as Helm does, numbers go via JSON.
	if got := toYAML([]interface{}{3.0, 2.5, 10, int64(1) << 62}); got != "- 3\n- 2.5\n- 10\n- 4611686018427387904" {
		t.Errorf("got %q", got)
	}
}

func TestDefaultAndEmpty(t *testing.T) {
	data := map[string]interface{}{
		"Values": map[string]interface{}{
			"zero": 0.0, "f": false, "s": "", "m": map[string]interface{}{}, "l": []interface{}{},
			"n": 2.0, "t": true, "str": "x", "full": map[string]interface{}{"a": 1.0},
		},
	}
	got := execute(t, `{{ default "d" .Values.zero }} {{ default "d" .Values.f }} {{ default "d" .Values.s }} `+
		`{{ default "d" .Values.m }} {{ default "d" .Values.l }} {{ default "d" .Values.missing }} {{ default "d" }} `+
		`{{ default "d" .Values.n }} {{ default "d" .Values.t }} {{ default "d" .Values.str }} {{ default "d" 0 }}`, data)
	if want := "d d d d d d d 2 true x d"; got != want {
		t.Errorf("default: got %q, want %q", got, want)
	}
	got = execute(t, `{{ empty .Values.zero }} {{ empty .Values.f }} {{ empty .Values.s }} {{ empty .Values.m }} `+
		`{{ empty .Values.l }} {{ empty .Values.missing }} {{ empty .Values.n }} {{ empty .Values.t }} `+
		`{{ empty .Values.str }} {{ empty .Values.full }} {{ empty (dict) }} {{ empty (list 0) }}`, data)
	if want := "true true true true true true false false false false true false"; got != want {
		t.Errorf("empty: got %q, want %q", got, want)
	}
	got = execute(t, `{{ ternary "a" "b" true }} {{ ternary "a" "b" .Values.f }}`, data)
	if want := "a b"; got != want {
		t.Errorf("ternary: got %q, want %q", got, want)
	}
}

func TestQuote(t *testing.T) {
	data := map[string]interface{}{"n": 3.0, "f": 1.5, "s": `say "hi"`}
	got := execute(t, `[{{ quote .missing }}] {{ quote .n }} {{ quote .f }} {{ quote 7 }} {{ quote .s }} `+
		`{{ quote "a" .missing "b" }} {{ quote true }}`, data)
	want := `[] "3" "1.5" "7" "say \"hi\"" "a" "b" "true"`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestTruncAndTrim(t *testing.T) {
	long := strings.Repeat("a", 62) + "-bcd"
	got := execute(t, `{{ trunc 5 "abcdefgh" }} {{ trunc -3 "abcdefgh" }} {{ trunc 20 "abc" }} {{ trunc -20 "abc" }} [{{ trunc 0 "abc" }}] `+
		`{{ trunc 63 .long | trimSuffix "-" | len }} {{ trimSuffix "-" "a-b" }} [{{ trim "  x \n" }}] `+
		`{{ replace "-" "_" "a-b-c" }}`, map[string]interface{}{"long": long})
	if want := "abcde fgh abc abc [] 62 a-b [x] a_b_c"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got = execute(t, `{{ nindent 2 "a\nb" }}|{{ nindent 4 "x" }}|{{ nindent 0 "y" }}`, nil)
	if want := "\n  a\n  b|\n    x|\ny"; got != want {
		t.Errorf("nindent: got %q, want %q", got, want)
	}
}

func TestKeysSortedAndDictFunctions(t *testing.T) {
	got := execute(t, `{{ keys (dict "zeta" 1 "alpha" 2 "Mid" 3 "beta" 4) | toJson }} `+
		`{{ keys (dict "b" 1) (dict "a" 2 "b" 3) | toJson }} {{ keys | len }}`, nil)
	if want := `["Mid","alpha","beta","zeta"] ["a","b","b"] 0`; got != want {
		t.Errorf("keys: got %q, want %q", got, want)
	}
	got = execute(t, `{{ $d := dict "a" 1 "b" nil "odd" }}{{ hasKey $d "b" }} {{ hasKey $d "c" }} {{ hasKey $d "odd" }} `+
		`{{ index $d "a" }} {{ index $d "b" | toJson }} {{ index $d "odd" | toJson }} {{ dict 1 "x" | toJson }} `+
		`{{ list 1 "a" nil | toJson }} {{ list | toJson }}`, nil)
	if want := `true false true 1 null "" {"1":"x"} [1,"a",null] []`; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestConversionsAndStrings(t *testing.T) {
	data := map[string]interface{}{"f": 3.9, "n": 8080.0}
	got := execute(t, `{{ toString .n }} {{ toString 1.5 }} {{ toString .f }} {{ toString "s" }} {{ toJson .n }} {{ toJson (dict "k" "<v>") }}`, data)
	if want := `8080 1.5 3.9 s 8080 {"k":"\u003cv\u003e"}`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	got = execute(t, `{{ b64enc "gatehouse" }} {{ sha256sum "" }} {{ contains "ate" "gatehouse" }} {{ hasPrefix "gate" "gatehouse" }} {{ hasPrefix "house" "gatehouse" }} {{ contains "x" "gatehouse" }}`, nil)
	if want := "Z2F0ZWhvdXNl e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 true true false false"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseTopLevelScalars(t *testing.T) {
	got := parseTopLevelScalars("a: 1\nb: \"x\\ty\" # c\nc: 'q''s'\n  d: nested\n- e: item\n#f: comment\ng:\nh: plain # comment\nurl: http://x:80/y\ni: |\n  block\n")
	want := map[string]string{"a": "1", "b": "x\ty", "c": "q's", "g": "", "h": "plain", "url": "http://x:80/y", "i": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
