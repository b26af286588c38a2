// Package sqlident quotes MySQL and MariaDB identifiers (schema, table and
// column names) for the SQL text the relay builds: a name from the config
// may hold any character, a backtick included. Its functions are pure.
package sqlident

import "strings"

// Quote returns name as a quoted identifier: in backticks, each backtick
// in it doubled.
func Quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Table returns schema.name with both parts quoted.
func Table(schema, name string) string { return Quote(schema) + "." + Quote(name) }
