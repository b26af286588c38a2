// Package config reads outbox-relay's YAML configuration.
//
// Load expands ${NAME} (and ${NAME:-default}) references to environment
// variables inside values, so passwords stay out of the file; rejects unknown
// keys with their line; applies every default in one place (Defaults),
// each declared once in a tag beside its field (SetDefaults); and
// Validate names the field and the bad value in each error. Secrets are of
// type Secret, which never prints its value.
package config

// This file owns the document and its loading: Config, the whole file, and
// Load, which expands ${NAME} references, decodes (checkKeys first), fills
// the defaults (defaults.go) and validates (validate.go). The sections'
// types: source.go (source, tables), sections.go (the others), sinks.go,
// console.go.

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is the whole file.
type Config struct {
	Source Source `yaml:"source"`
	// Tables are the outbox tables whose INSERTs are events. Required: at
	// least one.
	Tables     []Table    `yaml:"tables"`
	Checkpoint Checkpoint `yaml:"checkpoint"`
	DeadLetter DeadLetter `yaml:"dead_letter"`
	Delivery   Delivery   `yaml:"delivery"`
	// Sinks are the destinations, each with its own binlog stream, pipeline
	// and checkpoint. Required: at least one.
	Sinks    []Sink   `yaml:"sinks"`
	Log      Log      `yaml:"log"`
	HTTP     HTTP     `yaml:"http"`
	Prune    Prune    `yaml:"prune"`
	Tracing  Tracing  `yaml:"tracing"`
	Replay   Replay   `yaml:"replay"`
	Attempts Attempts `yaml:"attempts"`
	Console  Console  `yaml:"console"`
}

// Load reads, expands, decodes (rejecting unknown keys), defaults and
// validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// LoadSections is Load for a command that uses only the named top-level
// sections (status reads source and checkpoint, not the sinks): a ${NAME}
// elsewhere that is not set (a webhook secret) is left as written. When the
// config cannot be decoded or validated that way, the unset variable is
// the error, as with Load.
func LoadSections(path string, sections ...string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := parse(b, sections)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse is Load on bytes.
func Parse(b []byte) (*Config, error) { return parse(b, nil) }

// parse expands every ${NAME}, or, with sections, those of the named
// top-level sections, leaving the others as written when they are unset.
func parse(b []byte, sections []string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, errors.New("the file is empty: see deploy/config.example.yaml")
	}
	// unset is the first unset variable outside the sections: an error
	// only if the config is no good without it.
	var unset error
	lenient, err := expandRoot(&root, sections, &unset)
	if err != nil {
		return nil, err
	}
	cfg, err := decode(&root, lenient)
	if err != nil && unset != nil {
		return nil, errors.Join(unset, err)
	}
	return cfg, err
}

// decode decodes the expanded root (rejecting unknown keys), then defaults
// and validates the config; problems of the parts at the key paths lenient
// (which hold an unset variable a command does not need) are ignored.
func decode(root *yaml.Node, lenient []string) (*Config, error) {
	if errs := checkKeys(root); len(errs) > 0 {
		return nil, fmt.Errorf("%s (see deploy/config.example.yaml for every key)", strings.Join(errs, "; "))
	}
	// The expanded nodes are decoded as they are (their lines are the
	// file's); checkKeys has rejected every unknown key.
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// checkKeys has seen every key and value; this is a backstop.
			paths := map[int]string{}
			keyPaths(root, "", paths)
			all := map[int][]string{}
			linePaths(root, "", all)
			var msgs []string
			for _, m := range te.Errors {
				var line int
				if _, err := fmt.Sscanf(m, "line %d:", &line); err != nil || secretLine(all[line]) {
					m = hideValue(m)
				}
				if paths[line] != "" {
					m = paths[line] + ": " + m
				}
				msgs = append(msgs, m)
			}
			return nil, fmt.Errorf("%s (see deploy/config.example.yaml for every key and its type)", strings.Join(msgs, "; "))
		}
		return nil, err
	}
	for i := range cfg.Sinks {
		if err := cfg.Sinks[i].decodeSection(fmt.Sprintf("sinks[%d]", i)); err != nil {
			return nil, err
		}
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		var kept []error
		for _, e := range unjoin(err) {
			if !under(e.Error(), lenient) {
				kept = append(kept, e)
			}
		}
		if len(kept) > 0 {
			return nil, errors.Join(kept...)
		}
	}
	return &cfg, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandRoot expands the document root: every section, or with sections
// those named strictly and the others leniently (an unset variable is kept
// as written and the first one recorded in *unset). It returns the key
// paths of the lenient parts that hold an unset variable: a section
// ("http") or an item of a list ("sinks[1]").
func expandRoot(root *yaml.Node, sections []string, unset *error) ([]string, error) {
	m := root
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if sections == nil || m.Kind != yaml.MappingNode {
		return nil, expandNode(root, true, unset)
	}
	var lenient []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, v := m.Content[i].Value, m.Content[i+1]
		if slices.Contains(sections, key) {
			if err := expandNode(v, true, unset); err != nil {
				return nil, err
			}
			continue
		}
		parts, paths := []*yaml.Node{v}, []string{key}
		if v.Kind == yaml.SequenceNode {
			parts, paths = v.Content, nil
			for j := range v.Content {
				paths = append(paths, fmt.Sprintf("%s[%d]", key, j))
			}
		}
		for j, n := range parts {
			var here error
			expandNode(n, false, &here) // never fails when lenient
			if here != nil {
				lenient = append(lenient, paths[j])
				if *unset == nil {
					*unset = here
				}
			}
		}
	}
	return lenient, nil
}

// under reports whether a Validate message is about one of paths (it
// starts with the path, then '.', ':' or '[').
func under(msg string, paths []string) bool {
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(msg, p); ok && rest != "" && strings.ContainsRune(".:[", rune(rest[0])) {
			return true
		}
	}
	return false
}

// expandNode replaces ${NAME} and ${NAME:-default} in every scalar value.
// An unset NAME is an error when strict, else it stays as written and the
// first such error is kept in *unset.
func expandNode(n *yaml.Node, strict bool, unset *error) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := os.LookupEnv(m[1]); ok {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			missing = append(missing, m[1])
			return ref
		})
		if len(missing) > 0 {
			err := fmt.Errorf("line %d: environment variable %s is not set: export it, or write ${%s:-default}", n.Line, missing[0], missing[0])
			if strict {
				return err
			}
			if *unset == nil {
				*unset = err
			}
		}
		// Let the target field decide the type ("${PORT}" fills an int), but
		// never let a value from the environment turn into null.
		n.Tag, n.Style = "", 0
		switch n.Value {
		case "", "~", "null", "Null", "NULL":
			n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		if err := expandNode(c, strict, unset); err != nil {
			return err
		}
	}
	return nil
}

// unjoin lists the errors joined in err (errors.Join), or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
