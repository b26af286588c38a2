package checkpoint

import (
	"encoding/json"
	"slices"
)

// MarshalJSON writes the list as encoding/json would without it.
func (a Acked) MarshalJSON() ([]byte, error) { return a.appendJSON(nil), nil }

// appendJSON appends the list as encoding/json writes it ({"events": {key:
// [ids]}, "read_through": key}, keys sorted, compact), without reflection:
// a checkpoint is saved as soon as something is acknowledged, and the list
// can hold max_in_flight ids, so its encoding is on the delivery path's
// budget.
func (a Acked) appendJSON(b []byte) []byte {
	n := len(a.ReadThrough) + 32
	keys := make([]string, 0, len(a.Events))
	for k, ids := range a.Events {
		keys = append(keys, k)
		n += len(k) + 6
		for _, id := range ids {
			n += len(id) + 3
		}
	}
	slices.Sort(keys)
	b = slices.Grow(b, n)
	b = append(b, '{')
	if len(a.Events) > 0 {
		b = append(b, `"events":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			ids := a.Events[k]
			if ids == nil {
				b = append(b, "null"...)
				continue
			}
			b = append(b, '[')
			for j, id := range ids {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, id)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if a.ReadThrough != "" {
		if len(a.Events) > 0 {
			b = append(b, ',')
		}
		b = append(b, `"read_through":`...)
		b = appendJSONString(b, a.ReadThrough)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: as it is when it needs no
// escaping (GTIDs, UUIDs), else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
