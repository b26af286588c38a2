package sqlident

import (
	"errors"
	"fmt"
	"strings"
)

// CheckCondition checks a WHERE filter from the configuration or the
// command line before any server sees it: one condition on a table's
// columns (status = 'pending'), which the relay runs inside parentheses
// after its own conditions. It refuses what would let the text end the
// condition or the statement, or hide part of it: a ';' or a comment
// ("--", "#", "/*") outside a quoted string, a parenthesis closed before it
// was opened or left open, a quote left open. "" is no filter. Whether the
// columns exist and the condition parses is for the server to say.
func CheckCondition(where string) error {
	if strings.TrimSpace(where) == "" {
		return nil
	}
	fix := "write one condition on the table's columns, e.g. status = 'pending'"
	depth := 0
	var quote byte // the quote character of the literal or identifier we are in, 0 outside
	for i := 0; i < len(where); i++ {
		c := where[i]
		if quote != 0 {
			switch {
			case c == '\\' && quote != '`':
				i++ // an escaped character inside a string literal
			case c == quote && i+1 < len(where) && where[i+1] == quote:
				i++ // a doubled quote: one quote character
			case c == quote:
				quote = 0
			}
			continue
		}
		switch {
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == ';':
			return fmt.Errorf("where filter %q: a ';' is not allowed (the filter is one condition, not statements); %s", where, fix)
		case c == '#', c == '-' && i+1 < len(where) && where[i+1] == '-', c == '/' && i+1 < len(where) && where[i+1] == '*':
			return fmt.Errorf("where filter %q: comments are not allowed (they would hide the rest of the query); %s", where, fix)
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return fmt.Errorf("where filter %q: a ')' closes a parenthesis it did not open; %s", where, fix)
			}
		}
	}
	switch {
	case quote != 0:
		return fmt.Errorf("where filter %q: a quote (%c) is not closed; %s", where, quote, fix)
	case depth > 0:
		return fmt.Errorf("where filter %q: %d parenthesis left open; %s", where, depth, fix)
	}
	for _, c := range where {
		if c == 0 {
			return errors.New("where filter: a NUL character is not allowed")
		}
	}
	return nil
}
