package config

// This file owns Secret and the rule that keeps secrets out of messages:
// which key paths lead to a secret, and a type error's value hidden.

import (
	"log/slog"
	"reflect"
	"regexp"
	"strings"
)

// Secret is a string that never appears in logs or printed configs.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "******"
}

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Reveal returns the secret's value, for the code that needs it.
func (s Secret) Reveal() string { return string(s) }

// secretLine reports whether one of paths (all the paths of a line) leads
// to or into a secret, or the line is unknown.
func secretLine(paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, p := range paths {
		if isSecretPath(p) {
			return true
		}
	}
	return false
}

var secretType = reflect.TypeFor[Secret]()

// isSecretPath reports whether the key path p ("sinks[0].webhook.endpoints[1].secrets[0]")
// leads to or into a field that holds a secret: one of type Secret, or one
// tagged secret:"true" (webhook secrets and headers, the Kafka SASL
// password). A path that leads nowhere is reported as secret.
func isSecretPath(p string) bool {
	t := reflect.TypeFor[Config]()
	for _, seg := range strings.Split(strings.NewReplacer("[", ".[").Replace(p), ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == secretType {
			return true
		}
		switch {
		case seg == "":
			continue
		case strings.HasPrefix(seg, "["):
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return true
			}
			t = t.Elem()
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			f, ok := yamlField(t, seg)
			if !ok {
				return true
			}
			if f.Tag.Get("secret") == "true" {
				return true
			}
			t = f.Type
		default:
			return true
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == secretType
}

// typeErrValue is the value a yaml type error quotes: "cannot unmarshal
// !!str `whsec_U...` into []string".
var typeErrValue = regexp.MustCompile("(cannot unmarshal \\S+) `.*` (into )")

// hideValue drops the quoted value from a yaml type error.
func hideValue(msg string) string {
	return typeErrValue.ReplaceAllString(msg, "$1 (value hidden: the key may hold a secret) $2")
}
