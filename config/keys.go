package config

// This file owns the document's keys: checkKeys (unknown keys and values of
// the wrong shape, in the file's words), and the key paths of each line that
// messages name.

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkKeys walks the YAML document against the Config struct before it is
// decoded and reports, with each key's path and line, the keys the relay does
// not know (with the nearest known key: "did you mean") and the values of the
// wrong shape or type, in the file's words rather than Go's (a duration, a
// whole number, a list). Nothing of the Go types shows in its messages.
//
// A value is quoted only when neither its key nor any key on its line may
// hold a secret (isSecretPath): a secret written where a list is expected
// must not end up in an error message, a terminal or a log.
func checkKeys(root *yaml.Node) []string {
	var errs []string
	lines := map[int][]string{}
	linePaths(root, "", lines)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	w := walker{errs: &errs, lines: lines}
	w.walk(root, reflect.TypeOf(Config{}), "")
	return errs
}

// walker carries what walkKeys needs besides the node at hand.
type walker struct {
	errs  *[]string
	lines map[int][]string // every key path of each line
}

// quote shows a scalar value in a message, or says it is hidden.
func (w walker) quote(n *yaml.Node, path string) string {
	if isSecretPath(path) || secretLine(append(w.lines[n.Line], path)) {
		return "a value (hidden: the key may hold a secret)"
	}
	return fmt.Sprintf("%q", n.Value)
}

var durationType = reflect.TypeOf(time.Duration(0))

func (w walker) walk(n *yaml.Node, t reflect.Type, path string) {
	errs := w.errs
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value: the default
	}
	at := func(what string) {
		p := path
		if p == "" {
			p = "the file"
		}
		*errs = append(*errs, fmt.Sprintf("%s: line %d: %s", p, n.Line, what))
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			at(fmt.Sprintf("want a mapping of keys (%s), got %s", strings.Join(yamlKeys(t), ", "), w.shape(n, path)))
			return
		}
		fields := map[string]reflect.Type{}
		for _, name := range yamlKeys(t) {
			f, _ := yamlField(t, name)
			fields[name] = f.Type
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				msg := fmt.Sprintf("%s: line %d: unknown key %q", p, k.Line, k.Value)
				if s := nearest(k.Value, yamlKeys(t)); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				} else {
					msg += fmt.Sprintf(" (known keys here: %s)", strings.Join(yamlKeys(t), ", "))
				}
				*errs = append(*errs, msg)
				continue
			}
			w.walk(v, ft, p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			at("want a list, got " + w.shape(n, path))
			return
		}
		for i, c := range n.Content {
			w.walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			at("want a mapping, got " + w.shape(n, path))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			at(fmt.Sprintf("want %s, got %s", describe(t), w.shape(n, path)))
			return
		}
		v := reflect.New(t)
		if err := n.Decode(v.Interface()); err != nil {
			at(fmt.Sprintf("%s is not %s", w.quote(n, path), describe(t)))
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a field takes, in the config file's words.
func describe(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration (such as 500ms, 10s, 5m)"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "a whole number"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "a whole number, 0 or more"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a value"
}

func (w walker) shape(n *yaml.Node, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return w.quote(n, path)
	}
	return "nothing"
}

// yamlKeys lists the keys a struct type takes, sorted. A sink takes name,
// type and the section of every registered kind.
func yamlKeys(t reflect.Type) []string {
	if t == sinkType {
		keys := sinkKeys()
		sort.Strings(keys)
		return keys
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" && t.Field(i).IsExported() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// nearest returns the known key closest to key (edit distance at most a
// third of its length, at least 2), or "".
func nearest(key string, known []string) string {
	best, bestD := "", max(2, len(key)/3)+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyPaths records, for each line holding a mapping value, its key path
// (e.g. "delivery.linger", "sinks[1].type").
func keyPaths(n *yaml.Node, path string, out map[int]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyPaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if _, ok := out[n.Content[i].Line]; !ok || n.Content[i+1].Kind == yaml.ScalarNode {
				out[n.Content[i].Line] = p
			}
			keyPaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := out[c.Line]; !ok {
				out[c.Line] = p
			}
			keyPaths(c, p, out)
		}
	}
}

// linePaths records, for each line, the paths of every node on it (flow
// style puts several keys on one line).
func linePaths(n *yaml.Node, path string, out map[int][]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			linePaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			out[n.Content[i].Line] = append(out[n.Content[i].Line], p)
			out[n.Content[i+1].Line] = append(out[n.Content[i+1].Line], p)
			linePaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			out[c.Line] = append(out[c.Line], p)
			linePaths(c, p, out)
		}
	}
}

// yamlField is the field of struct type t under the key name; under a
// sink, a section key is the registered kind's section.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t == sinkType {
		if st, ok := sinkSectionType(name); ok {
			return reflect.StructField{Name: name, Type: st}, true
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
