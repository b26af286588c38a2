package canal

import (
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/event"
)

// Most outbox tables map only an integer or character id, character
// aggregate type, aggregate id and type columns and a payload (no header
// or trace context columns). Their rows are decoded direct: each narrow row
// image straight into its event, with no go-mysql value per column (each a
// boxed value, and a []any per row) and no copy of the payload per event:
// the event's payload is a capped slice of the rows event's narrow image
// (a copy of its own, never reused), and its texts are cut from one string
// per rows event. The events are those fill makes of go-mysql's values
// (TestNarrowRowsGiveTheEventsOfWholeRows).

// directCols are the narrow columns of a table decoded direct: each the
// index of its field's column among the narrow map's, -1 when unmapped.
type directCols struct {
	id, aggType, aggID, typ, payload int
}

// directOf returns how the rows of table t (narrow columns cols of table
// map e, fields f) are decoded direct, and false when they cannot be: a
// header or trace context column, or a column type other than those above.
func directOf(t *Table, e *replication.TableMapEvent, f fields, cols []int) (directCols, bool) {
	if len(f.headers) > 0 || f.traceParent >= 0 || f.traceState >= 0 || t.Columns.TraceParent != "" || t.Columns.TraceState != "" {
		return directCols{}, false
	}
	n := f.in(cols)
	d := directCols{id: n.id, aggType: n.aggType, aggID: n.aggID, typ: n.typ, payload: n.payload}
	switch e.ColumnType[f.id] {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
	default:
		return directCols{}, false
	}
	for _, c := range []int{f.aggType, f.aggID, f.typ, f.payload} {
		if c >= 0 && !textColumn(e, c) {
			return directCols{}, false
		}
	}
	return d, true
}

// textColumn reports whether column c holds bytes go-mysql hands over as
// they are (a string or a []byte): VARCHAR, CHAR, BLOB and TEXT (MariaDB's
// JSON is a LONGTEXT); not MySQL's binary JSON, ENUM or SET.
func textColumn(e *replication.TableMapEvent, c int) bool {
	switch e.ColumnType[c] {
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_BLOB:
		return true
	case mysql.MYSQL_TYPE_STRING:
		// CHAR, unless the metadata's real type says ENUM or SET.
		meta := e.ColumnMeta[c]
		if meta < 256 {
			return true
		}
		rt := uint8(meta >> 8)
		if rt&0x30 != 0x30 {
			rt |= 0x30
		}
		return rt == mysql.MYSQL_TYPE_STRING
	}
	return false
}

// events decodes img (narrow row images of nm.tm) into one event per row,
// each with Table set to name; false when a value cannot be read (go-mysql
// then decodes the rows and says what is wrong).
func (nm *narrowMap) events(img []byte, name string) ([]event.Event, bool) {
	rows, ok := nm.rows(img, nil)
	if !ok {
		return nil, false
	}
	evs := make([]event.Event, rows)
	all := string(img) // the texts are cut from it, at their offsets in img
	d := nm.direct
	var ids []byte // integer ids' decimal text
	var idEnds []int
	if d.id >= 0 && isInt(nm.tm.ColumnType[d.id]) {
		ids, idEnds = make([]byte, 0, 20*rows), make([]int, 0, 2*rows)
	}
	unsigned := nm.unsigned
	i := 0
	nm.rows(img, func(k, at int, v []byte, tp byte) {
		e := &evs[i]
		if k < 0 { // the row's end
			e.Table = name
			i++
			return
		}
		switch k {
		case d.id:
			switch {
			case isInt(tp):
				ids = appendInt(ids, v, tp, unsigned[k])
				idEnds = append(idEnds, i, len(ids))
			case utf8.Valid(v):
				e.ID = all[at : at+len(v)]
			default:
				e.ID = hex.EncodeToString(v) // bytes that are not text, as fill
			}
		case d.payload:
			e.Payload = v[:len(v):len(v)]
		}
		switch k {
		case d.aggType:
			e.AggregateType = all[at : at+len(v)]
		}
		switch k {
		case d.aggID:
			e.AggregateID = all[at : at+len(v)]
		}
		switch k {
		case d.typ:
			e.Type = all[at : at+len(v)]
		}
	})
	if len(idEnds) > 0 {
		text, start := string(ids), 0
		for j := 0; j < len(idEnds); j += 2 {
			evs[idEnds[j]].ID = text[start:idEnds[j+1]]
			start = idEnds[j+1]
		}
	}
	return evs, true
}

// rows walks the narrow row images of img, calling value (when not nil)
// with each non-NULL value (k its narrow column, at its offset in img, v
// its bytes without their length, tp its type) and with k = -1 at each
// row's end; it returns the number of rows, false when a value's length
// cannot be told.
func (nm *narrowMap) rows(img []byte, value func(k, at int, v []byte, tp byte)) (int, bool) {
	tm := nm.tm
	n := len(nm.cols)
	nullBytes := (n + 7) / 8
	rows := 0
	for p := 0; p < len(img); {
		if p+nullBytes > len(img) {
			return 0, false
		}
		nulls := img[p : p+nullBytes]
		p += nullBytes
		for k := range n {
			if nulls[k>>3]&(1<<(k&7)) != 0 {
				continue // NULL: the field stays empty (a NULL payload nil)
			}
			tp, meta := tm.ColumnType[k], tm.ColumnMeta[k]
			l, ok := valueLen(img[p:], tp, meta)
			if !ok || p+l > len(img) {
				return 0, false
			}
			if value != nil {
				skip := 0
				if !isInt(tp) {
					skip = l - lengthless(img[p:], tp, meta)
				}
				value(k, p+skip, img[p+skip:p+l], tp)
			}
			p += l
		}
		if value != nil {
			value(-1, 0, nil, 0)
		}
		rows++
	}
	return rows, true
}

func isInt(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		return true
	}
	return false
}

// lengthless is the length of the text value at the start of data, without
// the length before it.
func lengthless(data []byte, tp byte, meta uint16) int {
	size := 0
	switch tp {
	case mysql.MYSQL_TYPE_BLOB:
		size = int(meta)
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		size = 1
		if meta >= 256 {
			size = 2
		}
	case mysql.MYSQL_TYPE_STRING:
		length := int(meta)
		if meta >= 256 {
			b0, b1 := uint8(meta>>8), uint8(meta&0xff)
			if b0&0x30 != 0x30 {
				length = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
			} else {
				length = int(meta & 0xff)
			}
		}
		size = 1
		if length >= 256 {
			size = 2
		}
	}
	var l int
	for j := size - 1; j >= 0; j-- {
		l = l<<8 | int(data[j])
	}
	return l
}

// appendInt appends the decimal text of the little-endian integer v of
// type tp, as go-mysql decodes it (signed unless unsigned).
func appendInt(b, v []byte, tp byte, unsigned bool) []byte {
	var u uint64
	for j := len(v) - 1; j >= 0; j-- {
		u = u<<8 | uint64(v[j])
	}
	if unsigned {
		return strconv.AppendUint(b, u, 10)
	}
	bits := uint(len(v) * 8)
	x := int64(u<<(64-bits)) >> (64 - bits) // sign-extended
	return strconv.AppendInt(b, x, 10)
}
