// Package paging is the paging of the relay's JSON lists (the console API's
// endpoints, attempts and dead letters, the metrics listener's
// /endpoints): a limit, an opaque cursor (iterator in a request, next in
// its answer, as Svix does), and the keyset walk that fills a page. A row
// that exists throughout a walk is on exactly one of its pages, whatever
// is added or deleted meanwhile. It keeps no state: safe for concurrent
// use.
package paging

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// The size of a page: DefaultLimit without a limit, at most MaxLimit.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ScanFactor bounds the rows a page with a filter the store cannot apply
// examines: ScanFactor × its limit. A page that reaches it answers with
// fewer rows than its limit, and a next.
const ScanFactor = 10

// Limit reads the query's limit: DefaultLimit when it has none.
func Limit(v url.Values) (int, error) {
	x := v.Get("limit")
	if x == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(x)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("limit %q: use 1 to %d (default %d)", x, MaxLimit, DefaultLimit)
	}
	return n, nil
}

// EncodeCursor returns the cursor of a list (a letter of its own) at the
// key fields, the key of the last row a page examined: base64url of the
// letter and the fields, each length-prefixed. It says where the next
// page starts, nothing more: who may see what is decided for each page as
// for the first.
func EncodeCursor(list byte, fields ...string) string {
	b := []byte{list}
	for _, f := range fields {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// BadCursor is the error of an iterator that is not one of the list's.
func BadCursor(it string) error {
	if len(it) > 40 {
		it = it[:40] + "…"
	}
	return fmt.Errorf("iterator %q is not a cursor of this list: pass the next of the previous page as it was given, or leave iterator out to start from the first page", it)
}

// DecodeCursor returns the n fields of the cursor it of list, or an error
// saying how to fix it.
func DecodeCursor(list byte, it string, n int) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(it)
	if err != nil || len(b) == 0 || b[0] != list || len(it) > 1024 {
		return nil, BadCursor(it)
	}
	rest := string(b[1:])
	var out []string
	for rest != "" {
		l, after, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(l)
		if !ok || err != nil || size < 0 || size > len(after) || len(l) > 4 {
			return nil, BadCursor(it)
		}
		out, rest = append(out, after[:size]), after[size:]
	}
	if len(out) != n {
		return nil, BadCursor(it)
	}
	return out, nil
}

// Fill walks a list by its key from after and returns its next page: at
// most limit items that keep selects, and, when the list goes on, the key
// the next page starts after. read returns the next at most n items after
// a key, in the list's order (fewer only at its end). Each page starts
// after the key of the last row the page before examined, so a row that
// exists throughout a walk is on exactly one of its pages. A page
// examines at most ScanFactor × limit rows.
func Fill[T, K any](limit int, after K, read func(after K, n int) ([]T, error), key func(T) K, keep func(T) bool) (page []T, next K, more bool, err error) {
	cur := after
	for examined := 0; examined < ScanFactor*limit; {
		n := limit + 1 - len(page)
		got, err := read(cur, n)
		if err != nil {
			return nil, next, false, err
		}
		for _, x := range got {
			cur = key(x)
			examined++
			if !keep(x) {
				continue
			}
			if page = append(page, x); len(page) == limit+1 {
				return page[:limit], key(page[limit-1]), true, nil
			}
		}
		if len(got) < n {
			return page, next, false, nil
		}
	}
	return page, cur, true, nil
}

// Answer is the answer of a list: its items under name, done, and next
// (the iterator of the next page) while it goes on.
func Answer(name string, items any, next string, more bool) map[string]any {
	out := map[string]any{name: items, "done": !more}
	if more {
		out["next"] = next
	}
	return out
}
