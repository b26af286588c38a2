package mysqlprimary

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
)

// MySQL's binary JSON format (sql-common/json_binary.h), as written in row
// events for JSON columns.
const (
	jsonSmallObject = 0x00
	jsonLargeObject = 0x01
	jsonSmallArray  = 0x02
	jsonLargeArray  = 0x03
	jsonLiteral     = 0x04
	jsonInt16       = 0x05
	jsonUint16      = 0x06
	jsonInt32       = 0x07
	jsonUint32      = 0x08
	jsonInt64       = 0x09
	jsonUint64      = 0x0a
	jsonDouble      = 0x0b
	jsonString      = 0x0c

	jsonNull  = 0x00
	jsonTrue  = 0x01
	jsonFalse = 0x02
)

// JSON is the text of a JSON document for a JSON column. Integers in the text
// are stored as MySQL stores them (the smallest of int16, int32, int64,
// uint64 that holds them), numbers with a fraction or exponent as doubles,
// and object keys sorted as MySQL sorts them (shorter first, then bytewise).
type JSON string

// jsonValue is a parsed JSON document that keeps each number's literal.
type jsonValue struct {
	kind   byte // 'o', 'a', 's', 'n', 't', 'f', 'z' (null)
	str    string
	num    json.Number
	keys   []string
	values []*jsonValue
}

// EncodeJSON returns MySQL's binary form of a JSON text document.
func EncodeJSON(text string) ([]byte, error) {
	return encodeJSON(text, jsonMySQL)
}

// jsonStyle is how a server lays out a document: MySQL, or Dolt, which
// stores every number as a double and sorts object keys bytewise.
type jsonStyle int

const (
	jsonMySQL jsonStyle = iota
	jsonDolt
)

func encodeJSON(text string, style jsonStyle) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	v, err := parseJSON(dec)
	if err != nil {
		return nil, fmt.Errorf("parse JSON %q: %w", text, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("parse JSON %q: trailing data", text)
	}
	if style == jsonDolt {
		doltStyle(v)
	}
	return encodeJSONValue(v, style)
}

// doltStyle turns every number into a double.
func doltStyle(v *jsonValue) {
	if v.kind == 'n' {
		f, _ := v.num.Float64()
		v.num = json.Number(strconv.FormatFloat(f, 'e', -1, 64))
	}
	for _, c := range v.values {
		doltStyle(c)
	}
}

func parseJSON(dec *json.Decoder) (*jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jsonValue{kind: 'o'}
			idx := map[string]int{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				c, err := parseJSON(dec)
				if err != nil {
					return nil, err
				}
				if i, dup := idx[k]; dup {
					v.values[i] = c // MySQL keeps the last duplicate
					continue
				}
				idx[k] = len(v.keys)
				v.keys = append(v.keys, k)
				v.values = append(v.values, c)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		case '[':
			v := &jsonValue{kind: 'a'}
			for dec.More() {
				c, err := parseJSON(dec)
				if err != nil {
					return nil, err
				}
				v.values = append(v.values, c)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return &jsonValue{kind: 's', str: t}, nil
	case json.Number:
		return &jsonValue{kind: 'n', num: t}, nil
	case bool:
		if t {
			return &jsonValue{kind: 't'}, nil
		}
		return &jsonValue{kind: 'f'}, nil
	case nil:
		return &jsonValue{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// encodeJSONValue writes a top-level document: its type byte, then its value.
func encodeJSONValue(v *jsonValue, style jsonStyle) ([]byte, error) {
	typ, body, err := encodeJSONBody(v, false, style)
	if err != nil {
		return nil, err
	}
	if typ == jsonLiteral { // a top-level literal is a type and one byte
		return []byte{typ, body[0]}, nil
	}
	return append([]byte{typ}, body...), nil
}

// encodeJSONBody returns the type of v and its encoding without the type byte.
func encodeJSONBody(v *jsonValue, forceLarge bool, style jsonStyle) (byte, []byte, error) {
	switch v.kind {
	case 'z':
		return jsonLiteral, []byte{jsonNull}, nil
	case 't':
		return jsonLiteral, []byte{jsonTrue}, nil
	case 'f':
		return jsonLiteral, []byte{jsonFalse}, nil
	case 's':
		return jsonString, append(varLen(len(v.str)), v.str...), nil
	case 'n':
		return encodeJSONNumber(v.num)
	case 'o', 'a':
		if !forceLarge {
			typ, b, err := encodeJSONContainer(v, false, style)
			if err == nil {
				return typ, b, nil
			}
			if !errors.Is(err, errTooLarge) {
				return 0, nil, err
			}
		}
		return encodeJSONContainer(v, true, style)
	}
	return 0, nil, fmt.Errorf("unknown JSON value kind %q", v.kind)
}

var errTooLarge = errors.New("too large for the small format")

func encodeJSONNumber(n json.Number) (byte, []byte, error) {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		switch {
		case i >= math.MinInt16 && i <= math.MaxInt16:
			return jsonInt16, binary.LittleEndian.AppendUint16(nil, uint16(int16(i))), nil
		case i >= math.MinInt32 && i <= math.MaxInt32:
			return jsonInt32, binary.LittleEndian.AppendUint32(nil, uint32(int32(i))), nil
		default:
			return jsonInt64, binary.LittleEndian.AppendUint64(nil, uint64(i)), nil
		}
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return jsonUint64, binary.LittleEndian.AppendUint64(nil, u), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("number %q: %w", s, err)
	}
	return jsonDouble, binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)), nil
}

// inlined reports whether a value of type typ is stored in its value entry.
func inlined(typ byte, large bool) bool {
	switch typ {
	case jsonLiteral, jsonInt16, jsonUint16:
		return true
	case jsonInt32, jsonUint32:
		return large
	}
	return false
}

func encodeJSONContainer(v *jsonValue, large bool, style jsonStyle) (byte, []byte, error) {
	offSize := 2
	if large {
		offSize = 4
	}
	keys, values := v.keys, v.values
	if v.kind == 'o' {
		// MySQL stores keys sorted by length, then bytewise; Dolt bytewise.
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool {
			ka, kb := keys[order[a]], keys[order[b]]
			if style == jsonMySQL && len(ka) != len(kb) {
				return len(ka) < len(kb)
			}
			return ka < kb
		})
		sk := make([]string, len(keys))
		sv := make([]*jsonValue, len(keys))
		for i, o := range order {
			sk[i], sv[i] = keys[o], values[o]
		}
		keys, values = sk, sv
	}
	n := len(values)
	header := 2 * offSize
	if v.kind == 'o' {
		header += n * (offSize + 2)
	}
	header += n * (1 + offSize)
	put := func(b []byte, x int) []byte {
		if large {
			return binary.LittleEndian.AppendUint32(b, uint32(x))
		}
		return binary.LittleEndian.AppendUint16(b, uint16(x))
	}
	var tail []byte // keys, then non-inlined values
	offset := header
	var keyEntries []byte
	for _, k := range keys {
		if len(k) > math.MaxUint16 {
			return 0, nil, fmt.Errorf("object key of %d bytes", len(k))
		}
		if !large && offset > math.MaxUint16 {
			return 0, nil, errTooLarge
		}
		keyEntries = put(keyEntries, offset)
		keyEntries = binary.LittleEndian.AppendUint16(keyEntries, uint16(len(k)))
		tail = append(tail, k...)
		offset += len(k)
	}
	var valueEntries []byte
	for _, c := range values {
		typ, body, err := encodeJSONBody(c, large, style)
		if err != nil {
			return 0, nil, err
		}
		valueEntries = append(valueEntries, typ)
		if inlined(typ, large) {
			entry := make([]byte, offSize)
			copy(entry, body)
			valueEntries = append(valueEntries, entry...)
			continue
		}
		if !large && offset > math.MaxUint16 {
			return 0, nil, errTooLarge
		}
		valueEntries = put(valueEntries, offset)
		tail = append(tail, body...)
		offset += len(body)
	}
	if !large && (offset > math.MaxUint16 || n > math.MaxUint16) {
		return 0, nil, errTooLarge
	}
	out := put(nil, n)
	out = put(out, offset)
	out = append(out, keyEntries...)
	out = append(out, valueEntries...)
	out = append(out, tail...)
	typ := byte(jsonSmallObject)
	if v.kind == 'a' {
		typ = jsonSmallArray
	}
	if large {
		typ++
	}
	return typ, out, nil
}

// varLen is the variable-length length of a JSON string: 7 bits a byte, low
// bits first, the high bit set on every byte but the last.
func varLen(n int) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
