// Package secret reads a credential given one of three ways in a sink's
// config: the value itself, a file holding it, or the name of an environment
// variable holding it.
package secret

import (
	"fmt"
	"os"
	"strings"
)

// Resolve returns the credential of config field name (as "nats.password"):
// the contents of file (one trailing newline dropped) when set, else the
// variable env when set, else value.
func Resolve(name, value, file, env string) (string, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_file: %w", name, err)
		}
		return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("%s_env: environment variable %q is not set", name, env)
		}
		return v, nil
	}
	return value, nil
}

// Count is how many of the three ways are set: more than one is a mistake.
func Count(value, file, env string) int {
	n := 0
	for _, v := range []string{value, file, env} {
		if v != "" {
			n++
		}
	}
	return n
}
