package main

// A small block-style YAML emitter standing in for the sigs.k8s.io/yaml
// encoder behind Helm's `toYaml`. It only has to handle the values JSON can
// describe, which is all Helm's encoder sees too: that encoder first turns its
// input into JSON. The output differs from Helm's in presentation only (where
// strings are quoted, multi-line strings are double-quoted instead of literal
// blocks, key order is plain byte order); it always reads back, with a YAML 1.1
// or 1.2 parser, as the value that was encoded.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// toYAML is Helm's `toYaml`: v as block-style YAML without the final newline,
// or "" if v cannot be represented (Helm swallows that error too).
func toYAML(v interface{}) string {
	norm, err := normalizeJSON(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(encodeYAML(norm), "\n")
}

// normalizeJSON round-trips v through encoding/json, as sigs.k8s.io/yaml does,
// so that whatever a template built (ints, []string, nested dicts, ...) reaches
// the emitter as map[string]interface{}, []interface{}, string, bool, nil or
// json.Number. Numbers are kept as json.Number so that integers too large for
// a float64 survive unchanged.
func normalizeJSON(v interface{}) (interface{}, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out interface{}
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// encodeYAML renders a JSON-shaped value (see normalizeJSON; float64 is
// accepted as well) as a YAML document ending in a newline.
func encodeYAML(v interface{}) string {
	var b strings.Builder
	if isBlock(v) {
		writeBlock(&b, v, "", false)
	} else {
		b.WriteString(yamlScalar(v))
		b.WriteByte('\n')
	}
	return b.String()
}

// isBlock reports whether v is written as an indented block: non-empty maps
// and lists are; everything else, including {} and [], fits on one line.
func isBlock(v interface{}) bool {
	switch v := v.(type) {
	case map[string]interface{}:
		return len(v) > 0
	case []interface{}:
		return len(v) > 0
	}
	return false
}

// maxImplicitKey is a safe bound below YAML's limit of 1024 characters for a
// key written as `key: value`; longer keys use the explicit `? key` form.
const maxImplicitKey = 1000

// writeBlock writes a non-empty map or list, each line prefixed by ind. If
// inline is true the first line's indentation has already been written (it
// continues a "- " list item), so the first line gets no prefix.
//
// The layout is the one Helm's encoder produces: nested maps are indented two
// spaces below their key, a list that is a map value starts at its key's
// indentation, and a map or list inside a list starts on the "- " line.
func writeBlock(b *strings.Builder, v interface{}, ind string, inline bool) {
	switch v := v.(type) {
	case map[string]interface{}:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 || !inline {
				b.WriteString(ind)
			}
			key := yamlString(k)
			if len(key) > maxImplicitKey {
				b.WriteString("? " + key + "\n" + ind)
			} else {
				b.WriteString(key)
			}
			b.WriteByte(':')
			switch child := v[k]; {
			case !isBlock(child):
				b.WriteString(" " + yamlScalar(child) + "\n")
			case isList(child):
				b.WriteByte('\n')
				writeBlock(b, child, ind, false)
			default:
				b.WriteByte('\n')
				writeBlock(b, child, ind+"  ", false)
			}
		}
	case []interface{}:
		for i, item := range v {
			if i > 0 || !inline {
				b.WriteString(ind)
			}
			b.WriteString("- ")
			if isBlock(item) {
				writeBlock(b, item, ind+"  ", true)
			} else {
				b.WriteString(yamlScalar(item) + "\n")
			}
		}
	}
}

func isList(v interface{}) bool {
	_, ok := v.([]interface{})
	return ok
}

// yamlScalar writes a value that fits on one line: a scalar, {} or [].
func yamlScalar(v interface{}) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case string:
		return yamlString(v)
	case float64:
		return yamlFloat(v)
	case json.Number:
		return yamlNumber(v)
	case map[string]interface{}:
		return "{}" // only ever called for an empty map
	case []interface{}:
		return "[]" // only ever called for an empty list
	default:
		// Not reachable after normalizeJSON; quoting keeps it a string.
		return yamlString(fmt.Sprint(v))
	}
}

// yamlNumber writes a JSON number: integers that fit in an int64 as they are
// (these are exact, whatever their size), anything else as a float.
func yamlNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return yamlString(string(n)) // not a number after all; keep the text
	}
	return yamlFloat(f)
}

// maxExactInt is 2^53: every integer up to it is exactly a float64, so
// integral values in this range are written as integers (3, not 3.0 or 3e+00).
const maxExactInt = 1 << 53

// yamlFloat writes a float64 so that it reads back as the same number.
func yamlFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	case f == math.Trunc(f) && math.Abs(f) <= maxExactInt:
		return strconv.FormatInt(int64(f), 10)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	// YAML 1.1 only reads an exponent form as a float if it has a dot
	// ("1.0e+21", not "1e+21"); 'g' always writes the exponent's sign,
	// which YAML 1.1 also requires.
	if e := strings.IndexByte(s, 'e'); e >= 0 && !strings.Contains(s[:e], ".") {
		s = s[:e] + ".0" + s[e:]
	}
	return s
}

// yamlString writes s plain when that is certainly read back as the same
// string, and double-quoted otherwise.
func yamlString(s string) string {
	if isPlainSafe(s) {
		return s
	}
	return doubleQuote(s)
}

// isPlainSafe reports whether s can be written as a plain (unquoted) scalar
// and still read back as this string by both YAML 1.1 and YAML 1.2 parsers.
//
// The rule is deliberately conservative. Only letters, digits and "._/-" are
// allowed, which rules out every indicator and comment character as well as
// spaces. Every YAML 1.1 or 1.2 number, timestamp, .inf and .nan starts,
// after an optional sign, with a digit or a dot. So strings starting with a
// dot are always quoted, and strings starting with a digit are quoted unless
// they contain a letter that no number or timestamp can contain (so "500m",
// "128Mi" and "10s" stay plain, as in Helm's output, while "1e3", "0x1F",
// "1.2.3" and "30d" are quoted). Leading dashes must be followed by a letter
// ("-a" and "--listen" are plain; "-", "---", "-1" and "-_" are quoted).
// What is left can only be mistaken for a boolean or null word of YAML 1.1,
// or for the words Go's float parser accepts, and those are quoted in any
// letter case.
func isPlainSafe(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isASCIILetter(c) && !isASCIIDigit(c) && !strings.ContainsRune("._/-", rune(c)) {
			return false
		}
	}
	// Leading dashes ("-a", "--listen") are fine when a letter follows;
	// "-", "---", "-1" and "-.5" are not.
	body := strings.TrimLeft(s, "-")
	if body == "" || (body != s && !isASCIILetter(body[0])) {
		return false
	}
	if body[0] == '.' {
		return false
	}
	if isASCIIDigit(body[0]) && !strings.ContainsAny(body, nonNumericLetters) {
		return false
	}
	switch strings.ToLower(body) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null",
		"inf", "infinity", "nan":
		return false
	}
	return true
}

// nonNumericLetters are the ASCII letters that cannot occur in any YAML 1.1
// or 1.2 integer, float or timestamp, nor in anything Go's strconv number
// parsers accept. The others can: hex digits a-f, the base prefixes x, o and
// b, the exponents e and p, and the timestamp letters t and z.
const nonNumericLetters = "ghijklmnqrsuvwyGHIJKLMNQRSUVWY"

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isASCIIDigit(c byte) bool { return '0' <= c && c <= '9' }

// doubleQuote writes s as a double-quoted scalar. Quotes, backslashes, line
// breaks, tabs and every character that YAML 1.1 or 1.2 does not allow
// unescaped (control characters, DEL, C1 controls, the NEL/LS/PS line breaks
// of YAML 1.1, the BOM, U+FFFE/U+FFFF) are escaped, using only escapes that
// YAML 1.1, YAML 1.2 and JSON all share. Invalid UTF-8 becomes U+FFFD, as in
// encoding/json.
func doubleQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\ufffd`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case isYAMLPrintable(r):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// isYAMLPrintable reports whether r may appear unescaped inside a
// double-quoted scalar for both YAML 1.1 and 1.2. All characters for which it
// is false are below U+10000, so a \uXXXX escape always suffices.
func isYAMLPrintable(r rune) bool {
	switch {
	case r >= 0x20 && r <= 0x7e:
		return true
	case r >= 0xa0 && r <= 0xd7ff:
		return r != 0x2028 && r != 0x2029
	case r >= 0xe000 && r <= 0xfffd:
		return r != 0xfeff
	case r >= 0x10000 && r <= utf8.MaxRune:
		return true
	}
	return false
}
