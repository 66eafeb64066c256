package main

// The template functions: Helm's own (include, required, fail, toYaml,
// toJson) and the subset of Sprig that the chart uses. Each follows the
// argument order and semantics of its Helm/Sprig original, so a chart that
// renders here renders the same way under `helm template`. Only these
// functions exist: any other name is reported by text/template when the
// templates are parsed, just as Helm reports a function it does not know.
//
// Where Sprig panics on bad input (uniq, concat, dig), these return an error
// instead; text/template reports both the same way, as an execution error.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
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
		"default":  dfault,
		"empty":    empty,
		"coalesce": coalesce,
		"ternary":  ternary,

		// Sprig: strings.
		"quote":      quote,
		"squote":     squote,
		"indent":     indent,
		"nindent":    nindent,
		"trunc":      trunc,
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
		"trim":       strings.TrimSpace,
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"lower":      strings.ToLower,
		"upper":      strings.ToUpper,
		"contains":   func(substr, s string) bool { return strings.Contains(s, substr) },
		"hasPrefix":  func(prefix, s string) bool { return strings.HasPrefix(s, prefix) },
		"hasSuffix":  func(suffix, s string) bool { return strings.HasSuffix(s, suffix) },
		"b64enc":     func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"sha256sum":  sha256sum,

		// Sprig: conversions.
		"toString": strval,
		"int":      toInt,

		// Sprig: dictionaries and lists.
		"dict":      dict,
		"list":      func(v ...interface{}) []interface{} { return v },
		"hasKey":    func(d map[string]interface{}, key string) bool { _, ok := d[key]; return ok },
		"get":       get,
		"keys":      keys,
		"join":      func(sep string, v interface{}) string { return strings.Join(strslice(v), sep) },
		"splitList": func(sep, s string) []string { return strings.Split(s, sep) },
		"uniq":      uniq,
		"concat":    concat,
		"dig":       dig,
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

// coalesce returns the first non-empty argument, or nil.
func coalesce(v ...interface{}) interface{} {
	for _, x := range v {
		if !empty(x) {
			return x
		}
	}
	return nil
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

// squote wraps each non-nil argument in single quotes (without any escaping,
// as in Sprig) and joins them with spaces.
func squote(v ...interface{}) string {
	out := make([]string, 0, len(v))
	for _, x := range v {
		if x != nil {
			out = append(out, fmt.Sprintf("'%v'", x))
		}
	}
	return strings.Join(out, " ")
}

// indent prefixes every line of s with n spaces.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// nindent is indent preceded by a newline, for use right after a YAML key.
func nindent(n int, s string) string {
	return "\n" + indent(n, s)
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

// toInt is Sprig's `int` (spf13/cast's ToInt): numbers are truncated, bools
// become 0 or 1, strings are parsed with Go's base prefixes (so "0x1F" is 31
// and, as in cast, a leading zero means octal) after dropping a ".0" suffix;
// anything unconvertible is 0.
func toInt(v interface{}) int {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return int(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return int(rv.Float())
	case reflect.Bool:
		if rv.Bool() {
			return 1
		}
		return 0
	case reflect.String:
		if n, err := strconv.ParseInt(trimZeroDecimal(rv.String()), 0, 0); err == nil {
			return int(n)
		}
	}
	return 0
}

// trimZeroDecimal drops a decimal part made only of zeros ("12.00" → "12"),
// so that such strings convert to integers as they do in cast.
func trimZeroDecimal(s string) string {
	sawZero := false
	for i := len(s); i > 0; i-- {
		switch s[i-1] {
		case '.':
			if sawZero {
				return s[:i-1]
			}
			return s
		case '0':
			sawZero = true
		default:
			return s
		}
	}
	return s
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

// get returns d[key], or "" when the key is missing (not nil, as in Sprig).
func get(d map[string]interface{}, key string) interface{} {
	if v, ok := d[key]; ok {
		return v
	}
	return ""
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

// strslice converts a list (or a single value) to strings for `join`,
// skipping nil elements, as Sprig does.
func strslice(v interface{}) []string {
	switch v := v.(type) {
	case nil:
		return []string{}
	case []string:
		return v
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return []string{strval(v)}
	}
	out := make([]string, 0, rv.Len())
	for i := 0; i < rv.Len(); i++ {
		if x := rv.Index(i).Interface(); x != nil {
			out = append(out, strval(x))
		}
	}
	return out
}

// listElems returns the elements of a slice or array, or an error naming
// what was given instead.
func listElems(fn string, v interface{}) ([]interface{}, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, fmt.Errorf("%s: cannot use type %T as a list", fn, v)
	}
	out := make([]interface{}, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, nil
}

// uniq returns the list without repeated elements (compared with
// reflect.DeepEqual), keeping the first occurrence of each.
func uniq(list interface{}) ([]interface{}, error) {
	elems, err := listElems("uniq", list)
	if err != nil {
		return nil, err
	}
	out := []interface{}{}
next:
	for _, x := range elems {
		for _, y := range out {
			if reflect.DeepEqual(x, y) {
				continue next
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// concat joins lists into one. Like Sprig it yields a nil list when there
// are no elements at all.
func concat(lists ...interface{}) (interface{}, error) {
	var out []interface{}
	for _, l := range lists {
		elems, err := listElems("concat", l)
		if err != nil {
			return nil, err
		}
		out = append(out, elems...)
	}
	return out, nil
}

// dig is Sprig's `dig K1 K2 ... DEFAULT MAP`: it follows the keys through
// nested maps and returns the value found, or DEFAULT as soon as a key is
// missing.
func dig(args ...interface{}) (interface{}, error) {
	if len(args) < 3 {
		return nil, errors.New("dig needs at least three arguments")
	}
	d, ok := args[len(args)-1].(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("dig: last argument must be a map, not %T", args[len(args)-1])
	}
	def := args[len(args)-2]
	path := args[:len(args)-2]
	for i, k := range path {
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("dig: key %v is a %T, not a string", k, k)
		}
		v, found := d[key]
		if !found {
			return def, nil
		}
		if i == len(path)-1 {
			return v, nil
		}
		if d, ok = v.(map[string]interface{}); !ok {
			return nil, fmt.Errorf("dig: value at %q is a %T, not a map", key, v)
		}
	}
	return def, nil // unreachable: path is never empty
}
