package canal

import (
	"bytes"
	"reflect"
	"slices"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// An outbox row is decoded narrow: only the columns an event is made of
// (id, aggregate type and id, type, payload, the trace context and header
// columns) are decoded, by go-mysql's own decoder, and the others are
// stepped over by their length. go-mysql decodes every column of a row
// into a value of its own (a DATETIME(6) into a time.Time, boxed twice),
// which cost more CPU and allocations per event than the rest of the
// reader. The values of the columns used are go-mysql's, unchanged:
// the narrow row image is a copy of those columns' bytes, decoded with a
// table map of those columns only.
//
// A row is decoded whole, as before, when the rows event is compressed
// (MariaDB's log_bin_compress), when the row image lacks a column
// (binlog_row_image other than FULL), or when a column is of a type whose
// length this file does not know.

// narrowMap is the narrow table map of one outbox table map.
type narrowMap struct {
	src  *replication.TableMapEvent // the table map it was made for
	cols []int                      // the columns used, ascending
	tm   *replication.TableMapEvent // a table map of those columns only
	all  []byte                     // a column bitmap of every column of tm
	// direct: the rows are decoded straight into events (direct.go), with
	// the narrow columns of the fields, the table's name and tm's unsigned
	// columns.
	direct   directCols
	isDirect bool
	name     string
	unsigned map[int]bool
}

// narrowCache keeps the narrow map of each outbox table between its table
// maps (every transaction has its own), while the table's shape holds. It
// is used by the syncer's goroutine only (go-mysql's RowsEventDecodeFunc).
type narrowCache struct {
	r    *Reader
	maps map[*Table]*narrowMap
}

// compressedField is the index of RowsEvent's unexported compressed flag
// (MariaDB's *_COMPRESSED_EVENT_V1), read through reflect; nil if go-mysql
// no longer has it, and every row is then decoded whole.
var compressedField = func() []int {
	f, ok := reflect.TypeFor[replication.RowsEvent]().FieldByName("compressed")
	if !ok || f.Type.Kind() != reflect.Bool {
		return nil
	}
	return f.Index
}()

// decode decodes the rows of an INSERT into outbox table t: narrow when it
// can, otherwise whole.
func (c *narrowCache) decode(t *Table, re *replication.RowsEvent, pos int, data []byte) error {
	if c.r.decodeWhole || compressedField == nil || reflect.ValueOf(re).Elem().FieldByIndex(compressedField).Bool() {
		return re.DecodeData(pos, data)
	}
	nm := c.lookup(t, re.Table)
	if nm == nil || len(nm.cols) == int(re.ColumnCount) || int(re.ColumnCount) != len(re.Table.ColumnType) {
		return re.DecodeData(pos, data)
	}
	for i := range int(re.ColumnCount) {
		if re.ColumnBitmap1[i>>3]&(1<<(i&7)) == 0 {
			return re.DecodeData(pos, data) // not a full row image
		}
	}
	img, ok := nm.image(re.Table, data[pos:])
	if !ok {
		c.r.unknown.Add(1)
		return re.DecodeData(pos, data) // a type not known here, or a row cut short: go-mysql says what
	}
	c.r.narrowed.Add(1)
	if nm.isDirect {
		if evs, ok := nm.events(img, nm.name); ok {
			c.r.direct.Add(1)
			// Each row is one value, its event: onEvent takes it as it is.
			cells := make([]any, len(evs))
			re.Rows = make([][]any, len(evs))
			for i := range evs {
				cells[i] = &evs[i]
				re.Rows[i] = cells[i : i+1 : i+1]
			}
			return nil
		}
	}
	table, count, bitmap := re.Table, re.ColumnCount, re.ColumnBitmap1
	re.Table, re.ColumnCount, re.ColumnBitmap1 = nm.tm, uint64(len(nm.cols)), nm.all
	err := re.DecodeData(0, img)
	re.Table, re.ColumnCount, re.ColumnBitmap1 = table, count, bitmap
	return err
}

// lookup returns the narrow map of t for table map e, nil when e does not
// map the columns t needs (resolve reports that).
func (c *narrowCache) lookup(t *Table, e *replication.TableMapEvent) *narrowMap {
	nm := c.maps[t]
	if nm != nil && (nm.src == e || sameShape(nm.src, e)) {
		nm.src = e
		return nm
	}
	f, err := fieldColumns(t, e)
	if err != nil {
		return nil
	}
	cols := f.used()
	nm = newNarrowMap(e, cols)
	nm.direct, nm.isDirect = directOf(t, e, f, cols)
	nm.name = t.FullName()
	nm.unsigned = nm.tm.UnsignedMap()
	if c.maps == nil {
		c.maps = map[*Table]*narrowMap{}
	}
	c.maps[t] = nm
	return nm
}

// sameShape reports whether two table maps have the same columns (names,
// types, metadata, signedness, character sets): what is resolved from one
// (a narrow map, a tableMap) holds for the other.
func sameShape(a, b *replication.TableMapEvent) bool {
	return a.ColumnCount == b.ColumnCount && bytes.Equal(a.ColumnType, b.ColumnType) &&
		slices.Equal(a.ColumnMeta, b.ColumnMeta) && bytes.Equal(a.SignednessBitmap, b.SignednessBitmap) &&
		slices.EqualFunc(a.ColumnName, b.ColumnName, bytes.Equal) &&
		slices.Equal(a.DefaultCharset, b.DefaultCharset) && slices.Equal(a.ColumnCharset, b.ColumnCharset)
}

func newNarrowMap(e *replication.TableMapEvent, cols []int) *narrowMap {
	tm := &replication.TableMapEvent{
		TableID: e.TableID, Schema: e.Schema, Table: e.Table, ColumnCount: uint64(len(cols)),
	}
	unsigned := e.UnsignedMap()
	var sign []byte
	numeric, anyUnsigned := 0, false
	for _, c := range cols {
		tm.ColumnType = append(tm.ColumnType, e.ColumnType[c])
		tm.ColumnMeta = append(tm.ColumnMeta, e.ColumnMeta[c])
		if c < len(e.ColumnName) {
			tm.ColumnName = append(tm.ColumnName, e.ColumnName[c])
		}
		if !e.IsNumericColumn(c) {
			continue
		}
		if numeric%8 == 0 {
			sign = append(sign, 0)
		}
		if unsigned[c] {
			sign[numeric/8] |= 0x80 >> (numeric % 8)
			anyUnsigned = true
		}
		numeric++
	}
	if anyUnsigned {
		// Only then: without it go-mysql's UnsignedMap, asked for every
		// row, is nil rather than a new map.
		tm.SignednessBitmap = sign
	}
	all := make([]byte, (len(cols)+7)/8)
	for i := range cols {
		all[i>>3] |= 1 << (i & 7)
	}
	return &narrowMap{src: e, cols: cols, tm: tm, all: all}
}

// image returns the rows of data (full row images of e's table) as row
// images of the narrow table map: each a null bitmap of the columns used
// and their values' bytes. ok is false when a column's length cannot be
// told (a type not known here, or bytes cut short).
func (nm *narrowMap) image(e *replication.TableMapEvent, data []byte) (img []byte, ok bool) {
	n := int(e.ColumnCount)
	nullBytes := (n + 7) / 8
	narrowNull := (len(nm.cols) + 7) / 8
	img = make([]byte, 0, len(data))
	for p := 0; p < len(data); {
		if p+nullBytes > len(data) {
			return nil, false
		}
		nulls := data[p : p+nullBytes]
		p += nullBytes
		at := len(img)
		img = append(img, make([]byte, narrowNull)...)
		k := 0 // next used column
		for i := range n {
			if nulls[i>>3]&(1<<(i&7)) != 0 {
				if k < len(nm.cols) && nm.cols[k] == i {
					img[at+(k>>3)] |= 1 << (k & 7)
					k++
				}
				continue
			}
			l, ok := valueLen(data[p:], e.ColumnType[i], e.ColumnMeta[i])
			if !ok || p+l > len(data) {
				return nil, false
			}
			if k < len(nm.cols) && nm.cols[k] == i {
				img = append(img, data[p:p+l]...)
				k++
			}
			p += l
		}
	}
	return img, true
}

// valueLen is the length of a non-NULL value of type tp with metadata meta
// at the start of data in a row image, as go-mysql's decodeValue reads it;
// ok is false for a type it does not know, or bytes cut short.
func valueLen(data []byte, tp byte, meta uint16) (int, bool) {
	length := 0
	if tp == mysql.MYSQL_TYPE_STRING {
		if meta >= 256 {
			b0, b1 := uint8(meta>>8), uint8(meta&0xff)
			if b0&0x30 != 0x30 {
				length = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
				tp = b0 | 0x30
			} else {
				length = int(meta & 0xff)
				tp = b0
			}
		} else {
			length = int(meta)
		}
	}
	// prefixed is a value after a little-endian length of size bytes.
	prefixed := func(size int) (int, bool) {
		if size < 1 || size > 4 || len(data) < size {
			return 0, false
		}
		var l uint32
		for j := size - 1; j >= 0; j-- {
			l = l<<8 | uint32(data[j])
		}
		return size + int(l), true
	}
	switch tp {
	case mysql.MYSQL_TYPE_NULL:
		return 0, true
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_YEAR:
		return 1, true
	case mysql.MYSQL_TYPE_SHORT:
		return 2, true
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_DATE:
		return 3, true
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_TIMESTAMP:
		return 4, true
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_DATETIME:
		return 8, true
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		prec, scale := int(meta>>8), int(meta&0xff)
		if scale > prec {
			return 0, false
		}
		return decimalLen(prec, scale), true
	case mysql.MYSQL_TYPE_BIT:
		nbits := (meta>>8)*8 + meta&0xff
		return int(nbits+7) / 8, true
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		return int(4 + (meta+1)/2), true
	case mysql.MYSQL_TYPE_DATETIME2:
		return int(5 + (meta+1)/2), true
	case mysql.MYSQL_TYPE_TIME2:
		return int(3 + (meta+1)/2), true
	case mysql.MYSQL_TYPE_ENUM:
		if l := int(meta & 0xff); l == 1 || l == 2 {
			return l, true
		}
		return 0, false
	case mysql.MYSQL_TYPE_SET:
		return int(meta & 0xff), true
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR, mysql.MYSQL_TYPE_JSON:
		return prefixed(int(meta))
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		length = int(meta)
		fallthrough
	case mysql.MYSQL_TYPE_STRING:
		if length < 256 {
			return prefixed(1)
		}
		return prefixed(2)
	}
	return 0, false
}

// decimalLen is the length of a DECIMAL(prec, scale) value, as go-mysql's
// decodeDecimal reads it.
func decimalLen(prec, scale int) int {
	compressed := [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}
	integral := prec - scale
	return integral/9*4 + compressed[integral%9] + scale/9*4 + compressed[scale%9]
}
