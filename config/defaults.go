package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// A section's defaults are declared once, beside their fields, in a tag:
//
//	BatchSize int `yaml:"batch_size" default:"500"`
//
// written as the value would be in the config file: a string as it is
// (never quoted), a duration as 10s, a list in flow style ([a, b]).
// SetDefaults applies them; the docs (docs/options.md, each sink's page)
// and deploy/config.example.yaml are generated from them (tests in package
// docs hold the files to the declarations); and DefaultOf reads one for a
// message ("leave it out for the default 10s").
//
// A default that depends on another key (source.read_timeout is 3 ×
// source.heartbeat) has no value to declare: its field carries
// `derived:"3 × source.heartbeat"` instead, which the docs show, and the
// section's Defaults computes it. A field with neither has its zero value
// as its default (false, 0, "", none).
//
// A key with no default that the generated example config must show with a
// value (a required one, a secret from the environment) carries
// `example:"…"`, written as a default is; nothing but the example reads it.
// An example that starts with "# " is shown commented out (a key the
// example's relay must not use, such as the DSN of a MySQL checkpoint store
// next to store: file).
const (
	defaultTag = "default"
	derivedTag = "derived"
)

// SetDefaults sets every zero field of the struct p points to, of the
// structs it holds (nested sections, each item of a list of sections, a
// section behind a non-nil pointer) and so on down, to the default its
// field declares (see above). A nil pointer with a default gets one (a
// *bool declared true). Fields without a yaml key are left alone. It
// panics on a default that does not parse as its field's type (a test of
// every registered section holds that).
func SetDefaults(p any) {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: SetDefaults wants a pointer to a struct, got %T", p))
	}
	setDefaults(v.Elem())
}

func setDefaults(v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || yamlKey(f) == "" {
			continue
		}
		fv := v.Field(i)
		if def, ok := f.Tag.Lookup(defaultTag); ok {
			if fv.IsZero() || (fv.Kind() == reflect.Slice && fv.Len() == 0) {
				fv.Set(parseDefault(t, f, def))
			}
			continue
		}
		switch {
		case fv.Kind() == reflect.Struct && f.Type != durationType:
			setDefaults(fv)
		case fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().Kind() == reflect.Struct:
			setDefaults(fv.Elem())
		case fv.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			for j := range fv.Len() {
				setDefaults(fv.Index(j))
			}
		}
	}
}

// yamlKey is the key of a struct field in the file, or "".
func yamlKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

var (
	parsedMu sync.Mutex
	parsed   = map[reflect.Type]map[int]reflect.Value{} // struct type → field index → its default
)

// parseDefault returns the value a field's default declares, of its type.
func parseDefault(owner reflect.Type, f reflect.StructField, def string) reflect.Value {
	parsedMu.Lock()
	defer parsedMu.Unlock()
	byField := parsed[owner]
	if byField == nil {
		byField = map[int]reflect.Value{}
		parsed[owner] = byField
	}
	idx := f.Index[0]
	if v, ok := byField[idx]; ok {
		return copyValue(v)
	}
	v, err := ParseDefault(f.Type, def)
	if err != nil {
		panic(fmt.Sprintf("config: the default of %s.%s: %v", owner, f.Name, err))
	}
	byField[idx] = v
	return copyValue(v)
}

// copyValue copies what a pointer or slice default shares, so that no two
// configs hold the same *bool or backing array.
func copyValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(v.Elem())
		return p
	case reflect.Slice:
		return reflect.AppendSlice(reflect.MakeSlice(v.Type(), 0, v.Len()), v)
	}
	return v
}

// ParseDefault parses a declared default as a value of type t: a string
// as it is, anything else as a YAML value (10s, 500, true, [a, b]).
func ParseDefault(t reflect.Type, def string) (reflect.Value, error) {
	elem := t
	if t.Kind() == reflect.Pointer {
		elem = t.Elem()
	}
	v := reflect.New(elem)
	if elem.Kind() == reflect.String {
		v.Elem().SetString(def)
	} else {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(def), &n); err != nil || len(n.Content) != 1 {
			return reflect.Value{}, fmt.Errorf("%q is not a YAML value", def)
		}
		if err := n.Content[0].Decode(v.Interface()); err != nil {
			return reflect.Value{}, fmt.Errorf("%q is not %s", def, describe(elem))
		}
		if v.Elem().IsZero() {
			return reflect.Value{}, fmt.Errorf("%q is its type's zero value: leave the default out", def)
		}
	}
	if t.Kind() == reflect.Pointer {
		return v, nil
	}
	return v.Elem(), nil
}

// DefaultOf returns the default declared for the key path (dotted, as in
// the file: "retry.max_age") under the section type of v (a struct or a
// pointer to one), as declared: the value ("24h") or, for a derived
// default, what it is derived from. It panics on a path that leads to no
// field: the callers name their own fields.
func DefaultOf(v any, path string) string {
	t := reflect.TypeOf(v)
	var f reflect.StructField
	for _, key := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		var ok bool
		if f, ok = yamlField(t, key); !ok {
			panic(fmt.Sprintf("config: DefaultOf: %s has no key %q", t, key))
		}
		t = f.Type
	}
	if d, ok := f.Tag.Lookup(defaultTag); ok {
		return d
	}
	return f.Tag.Get(derivedTag)
}

// Defaults fills every unset field with its default: the defaults declared
// beside the fields (SetDefaults), then those derived from other keys, then
// each sink's section's (its kind's Defaults).
func (c *Config) Defaults() {
	s := &c.Source
	host, port := s.Host, s.Port
	SetDefaults(c)
	if len(s.Servers) > 0 {
		// host and port default only when no list of servers is set.
		s.Host, s.Port = host, port
	}
	setD(&s.ReadTimeout, 3*s.Heartbeat)
	dl := &c.DeadLetter
	setS(&dl.Store, c.Checkpoint.Store)
	if dl.Store == "file" {
		setS(&dl.Path, filepath.Join(filepath.Dir(c.Checkpoint.Path), "dead-letters"))
	}
	if c.Checkpoint.Store == "file" {
		setS(&c.Attempts.Path, c.Checkpoint.Path+".attempts")
	}
	for _, s := range c.Sinks {
		if s.Config != nil {
			s.Config.Defaults()
		}
	}
}

func setS(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setD(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}
