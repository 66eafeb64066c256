package main

// The template functions: Helm's own (include, required, fail, toYaml,
// toJson) and the subset of Sprig that the chart uses. Each follows the
// argument order and semantics of its Helm/Sprig original, so a chart that
// renders here renders the same way under `helm template`. Only these
// functions exist: any other name is reported by text/template when the
// templates are parsed, just as Helm reports a function it does not know.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"text/template"
)

// maxIncludeDepth bounds how often one template may be entered through
// `include` while it is already being executed. Helm uses the same limit; it
// turns runaway recursion into an error instead of a fatal stack overflow.
const maxIncludeDepth = 1000

// funcMap returns the template functions. `include` needs the template set it
// executes from, so it is a closure over t, as in Helm; this is what lets a
// defined template include itself recursively.
func funcMap(t *template.Template) template.FuncMap {
	includeDepth := map[string]int{}
	include := func(name string, data interface{}) (string, error) {
		if includeDepth[name] > maxIncludeDepth {
			return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
		}
		includeDepth[name]++
		defer func() { includeDepth[name]-- }()
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}

	return template.FuncMap{
		// Helm's own functions.
		"include":  include,
		"required": required,
		"fail":     fail,
		"toYaml":   toYAML,
		"toJson":   toJSON,

		// Sprig: defaults and flow.
		"default": dfault,
		"empty":   empty,
		"ternary": ternary,

		// Sprig: strings.
		"quote":      quote,
		"nindent":    nindent,
		"trunc":      trunc,
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"trim":       strings.TrimSpace,
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"contains":   func(substr, s string) bool { return strings.Contains(s, substr) },
		"hasPrefix":  func(prefix, s string) bool { return strings.HasPrefix(s, prefix) },
		"b64enc":     func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"sha256sum":  sha256sum,

		// Sprig: conversions.
		"toString": strval,

		// Sprig: dictionaries and lists.
		"dict":   dict,
		"list":   func(v ...interface{}) []interface{} { return v },
		"hasKey": func(d map[string]interface{}, key string) bool { _, ok := d[key]; return ok },
		"keys":   keys,
	}
}

// required returns val, or fails with msg when val is nil or the empty string
// (Helm's `required`; other empty values such as 0 or false pass).
func required(msg string, val interface{}) (interface{}, error) {
	if val == nil {
		return val, errors.New(msg)
	}
	if s, ok := val.(string); ok && s == "" {
		return val, errors.New(msg)
	}
	return val, nil
}

// fail always fails with msg (Helm's `fail`).
func fail(msg string) (string, error) {
	return "", errors.New(msg)
}

// toJSON is Helm's `toJson`: compact JSON, or "" if v cannot be encoded.
func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

// empty reports whether v is Sprig-empty: nil, false, a zero number, or a
// string, map, slice or array of length zero. Structs are never empty.
func empty(v interface{}) bool {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return true
	}
	switch rv.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() == 0
	case reflect.Complex64, reflect.Complex128:
		return rv.Complex() == 0
	case reflect.Struct:
		return false
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Pointer, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// dfault is Sprig's `default DEFAULT GIVEN`: GIVEN unless it is empty (or
// absent), in which case DEFAULT.
func dfault(def interface{}, given ...interface{}) interface{} {
	if len(given) == 0 || empty(given[0]) {
		return def
	}
	return given[0]
}

// ternary is Sprig's `ternary A B COND`: A if COND, else B.
func ternary(a, b interface{}, cond bool) interface{} {
	if cond {
		return a
	}
	return b
}

// strval converts any value to a string the way Sprig does (`toString`).
func strval(v interface{}) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprintf("%v", v)
	}
}

// quote double-quotes (Go %q) the string form of each non-nil argument and
// joins them with spaces; nil arguments are dropped, as in Sprig.
func quote(v ...interface{}) string {
	out := make([]string, 0, len(v))
	for _, x := range v {
		if x != nil {
			out = append(out, fmt.Sprintf("%q", strval(x)))
		}
	}
	return strings.Join(out, " ")
}

// nindent prefixes every line of s with n spaces and the whole with a
// newline, for use right after a YAML key (Sprig's `nindent`).
func nindent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// trunc keeps the first n bytes of s, or with a negative n the last -n bytes.
func trunc(n int, s string) string {
	if n < 0 && len(s)+n > 0 {
		return s[len(s)+n:]
	}
	if n >= 0 && len(s) > n {
		return s[:n]
	}
	return s
}

// sha256sum returns the hex-encoded SHA-256 digest of s.
func sha256sum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// dict builds a map from alternating keys and values; keys are converted
// with strval and a final key without a value maps to "".
func dict(v ...interface{}) map[string]interface{} {
	d := make(map[string]interface{}, len(v)/2)
	for i := 0; i < len(v); i += 2 {
		key := strval(v[i])
		if i+1 >= len(v) {
			d[key] = ""
			continue
		}
		d[key] = v[i+1]
	}
	return d
}

// keys returns the keys of all the given maps (repeated keys included, as in
// Sprig). Sprig returns them in Go's random map order; here they are sorted,
// so that the output, and the tests that check it, are deterministic. A chart
// must not rely on this order, since Helm does not provide it.
func keys(dicts ...map[string]interface{}) []string {
	k := []string{}
	for _, d := range dicts {
		for key := range d {
			k = append(k, key)
		}
	}
	sort.Strings(k)
	return k
}
