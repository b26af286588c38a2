package mysqlprimary

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// ColumnType is a column's SQL type.
type ColumnType int

// The column types the scripted primary can write in row events.
const (
	Int       ColumnType = iota // INT (4 bytes)
	BigInt                      // BIGINT (8 bytes)
	Varchar                     // VARCHAR(Length), utf8mb4
	Char                        // CHAR(Length), utf8mb4
	Binary                      // BINARY(Length)
	Varbinary                   // VARBINARY(Length)
	Text                        // TEXT, utf8mb4
	DateTime                    // DATETIME(Fsp)
	JSONType                    // JSON, written in MySQL's binary JSON format
)

// Collations written in table maps.
const (
	collationUTF8MB4 = 255 // utf8mb4_0900_ai_ci
	collationBinary  = 63
)

// Column is one column of a Table.
type Column struct {
	Name     string
	Type     ColumnType
	Length   int  // characters (Varchar, Char) or bytes (Binary, Varbinary)
	Fsp      int  // fractional seconds digits of DateTime, 0..6
	Unsigned bool // Int, BigInt
	Nullable bool
}

// Table is a table whose rows the scripted primary writes.
type Table struct {
	Schema     string
	Name       string
	Columns    []Column
	PrimaryKey []int // indexes into Columns
}

// OutboxTable is the Debezium-style outbox table of internal/outboxtest:
// seq BIGINT AUTO_INCREMENT PRIMARY KEY, id, aggregatetype, aggregateid and
// type VARCHAR(64), payload JSON.
func OutboxTable(schema string) Table {
	return Table{
		Schema: schema,
		Name:   "outbox",
		Columns: []Column{
			{Name: "seq", Type: BigInt},
			{Name: "id", Type: Varchar, Length: 64},
			{Name: "aggregatetype", Type: Varchar, Length: 64},
			{Name: "aggregateid", Type: Varchar, Length: 64},
			{Name: "type", Type: Varchar, Length: 64},
			{Name: "payload", Type: JSONType},
		},
		PrimaryKey: []int{0},
	}
}

// OutboxRow is a row of OutboxTable. payload is JSON text, a JSON value, or
// nil for SQL NULL (the table's payload column is NOT NULL on a real server;
// the scripted one writes what it is given).
func OutboxRow(seq int64, id, aggregateType, aggregateID, typ string, payload any) []any {
	if s, ok := payload.(string); ok {
		payload = JSON(s)
	}
	return []any{seq, id, aggregateType, aggregateID, typ, payload}
}

func (t Table) fullName() string { return t.Schema + "." + t.Name }

// dataType is information_schema.COLUMNS.DATA_TYPE.
func (c Column) dataType() string {
	return [...]string{"int", "bigint", "varchar", "char", "binary", "varbinary", "text", "datetime", "json"}[c.Type]
}

// columnType is information_schema.COLUMNS.COLUMN_TYPE.
func (c Column) columnType() string {
	s := c.dataType()
	switch c.Type {
	case Varchar, Char, Binary, Varbinary:
		s = fmt.Sprintf("%s(%d)", s, c.Length)
	case DateTime:
		if c.Fsp > 0 {
			s = fmt.Sprintf("%s(%d)", s, c.Fsp)
		}
	}
	if c.Unsigned {
		s += " unsigned"
	}
	return s
}

func (c Column) binlogType() byte {
	switch c.Type {
	case Int:
		return mysql.MYSQL_TYPE_LONG
	case BigInt:
		return mysql.MYSQL_TYPE_LONGLONG
	case Varchar, Varbinary:
		return mysql.MYSQL_TYPE_VARCHAR
	case Char, Binary:
		return mysql.MYSQL_TYPE_STRING
	case Text:
		return mysql.MYSQL_TYPE_BLOB
	case DateTime:
		return mysql.MYSQL_TYPE_DATETIME2
	case JSONType:
		return mysql.MYSQL_TYPE_JSON
	}
	panic(fmt.Sprintf("mysqlprimary: unknown column type %d", c.Type))
}

// maxBytes is the column's largest value in bytes (utf8mb4: 4 a character).
func (c Column) maxBytes() int {
	switch c.Type {
	case Varchar, Char:
		return 4 * c.Length
	}
	return c.Length
}

func (c Column) numeric() bool { return c.Type == Int || c.Type == BigInt }
func (c Column) character() bool { // as MySQL's is_character_type: by binlog type
	switch c.Type {
	case Varchar, Char, Binary, Varbinary, Text:
		return true
	}
	return false
}

func (c Column) collation() uint64 {
	if c.Type == Binary || c.Type == Varbinary {
		return collationBinary
	}
	return collationUTF8MB4
}

// meta is the column's metadata in a TABLE_MAP event.
func (c Column) meta() []byte {
	switch c.Type {
	case Varchar, Varbinary:
		return binary.LittleEndian.AppendUint16(nil, uint16(c.maxBytes()))
	case Char, Binary:
		n := c.maxBytes()
		real := byte(mysql.MYSQL_TYPE_STRING)
		real ^= byte((n & 0x300) >> 4)
		return []byte{real, byte(n & 0xff)}
	case Text:
		return []byte{2}
	case DateTime:
		return []byte{byte(c.Fsp)}
	case JSONType:
		return []byte{4}
	}
	return nil
}

// Optional metadata field types of TABLE_MAP (binlog_row_metadata).
const (
	optSignedness     = 1
	optDefaultCharset = 2
	optColumnCharset  = 3
	optColumnName     = 4
	optSimplePK       = 8
	optVisibility     = 12
)

// tableMapBody is a TABLE_MAP_EVENT body with binlog_row_metadata=FULL.
func tableMapBody(id uint64, t Table, version string) []byte {
	b := appendUint48(nil, id)
	b = binary.LittleEndian.AppendUint16(b, 1) // TM_BIT_LEN_EXACT_F
	b = append(b, byte(len(t.Schema)))
	b = append(b, t.Schema...)
	b = append(b, 0, byte(len(t.Name)))
	b = append(b, t.Name...)
	b = append(b, 0)
	b = append(b, mysql.PutLengthEncodedInt(uint64(len(t.Columns)))...)
	var meta []byte
	nulls := make([]byte, (len(t.Columns)+7)/8)
	for i, c := range t.Columns {
		b = append(b, c.binlogType())
		meta = append(meta, c.meta()...)
		if c.Nullable {
			nulls[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, mysql.PutLengthEncodedString(meta)...)
	b = append(b, nulls...)

	tlv := func(typ byte, v []byte) {
		b = append(b, typ)
		b = append(b, mysql.PutLengthEncodedInt(uint64(len(v)))...)
		b = append(b, v...)
	}
	// Signedness: one bit a numeric column, most significant first.
	var sign []byte
	n := 0
	for _, c := range t.Columns {
		if !c.numeric() {
			continue
		}
		if n%8 == 0 {
			sign = append(sign, 0)
		}
		if c.Unsigned {
			sign[n/8] |= 0x80 >> (n % 8)
		}
		n++
	}
	if n > 0 {
		tlv(optSignedness, sign)
	}
	// Character sets: the shorter of DEFAULT_CHARSET (the most common
	// collation, then exceptions by character-column index) and
	// COLUMN_CHARSET (every character column's collation).
	var colls []uint64
	count := map[uint64]int{}
	for _, c := range t.Columns {
		if c.character() {
			colls = append(colls, c.collation())
			count[c.collation()]++
		}
	}
	if len(colls) > 0 {
		def := colls[0]
		for k, v := range count {
			if v > count[def] || (v == count[def] && k < def) {
				def = k
			}
		}
		dflt := mysql.PutLengthEncodedInt(def)
		var each []byte
		for i, c := range colls {
			if c != def {
				dflt = append(dflt, mysql.PutLengthEncodedInt(uint64(i))...)
				dflt = append(dflt, mysql.PutLengthEncodedInt(c)...)
			}
			each = append(each, mysql.PutLengthEncodedInt(c)...)
		}
		if len(dflt) <= len(each) {
			tlv(optDefaultCharset, dflt)
		} else {
			tlv(optColumnCharset, each)
		}
	}
	var names []byte
	for _, c := range t.Columns {
		names = append(names, mysql.PutLengthEncodedString([]byte(c.Name))...)
	}
	tlv(optColumnName, names)
	if len(t.PrimaryKey) > 0 {
		var pk []byte
		for _, i := range t.PrimaryKey {
			pk = append(pk, mysql.PutLengthEncodedInt(uint64(i))...)
		}
		tlv(optSimplePK, pk)
	}
	if versionNumber(version) >= 80023 {
		vis := make([]byte, (len(t.Columns)+7)/8)
		for i := range t.Columns {
			vis[i/8] |= 0x80 >> (i % 8)
		}
		tlv(optVisibility, vis)
	}
	return b
}

func appendUint48(b []byte, v uint64) []byte {
	var x [8]byte
	binary.LittleEndian.PutUint64(x[:], v)
	return append(b, x[:6]...)
}

// writeRowsBody is a WRITE_ROWS_EVENT (v2) body for rows of t.
func writeRowsBody(id uint64, t Table, rows [][]any, last bool) ([]byte, error) {
	b := appendUint48(nil, id)
	flags := uint16(0)
	if last {
		flags = 1 // STMT_END_F
	}
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint16(b, 2) // extra data: none
	b = append(b, mysql.PutLengthEncodedInt(uint64(len(t.Columns)))...)
	present := make([]byte, (len(t.Columns)+7)/8)
	for i := range t.Columns {
		present[i/8] |= 1 << (i % 8)
	}
	b = append(b, present...)
	for r, row := range rows {
		if len(row) != len(t.Columns) {
			return nil, fmt.Errorf("table %s: row %d has %d values for %d columns", t.fullName(), r, len(row), len(t.Columns))
		}
		nulls := make([]byte, (len(t.Columns)+7)/8)
		var vals []byte
		for i, c := range t.Columns {
			if row[i] == nil {
				nulls[i/8] |= 1 << (i % 8)
				continue
			}
			v, err := encodeValue(c, row[i])
			if err != nil {
				return nil, fmt.Errorf("table %s: row %d column %s: %w", t.fullName(), r, c.Name, err)
			}
			vals = append(vals, v...)
		}
		b = append(b, nulls...)
		b = append(b, vals...)
	}
	return b, nil
}

func encodeValue(c Column, v any) ([]byte, error) {
	switch c.Type {
	case Int, BigInt:
		i, err := toInt64(v)
		if err != nil {
			return nil, err
		}
		if c.Type == Int {
			if (!c.Unsigned && (i < math.MinInt32 || i > math.MaxInt32)) || (c.Unsigned && (i < 0 || i > math.MaxUint32)) {
				return nil, fmt.Errorf("%d out of range for INT", i)
			}
			return binary.LittleEndian.AppendUint32(nil, uint32(i)), nil
		}
		return binary.LittleEndian.AppendUint64(nil, uint64(i)), nil
	case Varchar, Varbinary, Char, Binary, Text:
		s, err := toBytes(v)
		if err != nil {
			return nil, err
		}
		switch c.Type {
		case Char:
			s = []byte(strings.TrimRight(string(s), " "))
		case Binary:
			for len(s) > 0 && s[len(s)-1] == 0 {
				s = s[:len(s)-1] // MySQL packs BINARY without its trailing zero bytes
			}
		}
		if c.Type == Text {
			if len(s) > math.MaxUint16 {
				return nil, fmt.Errorf("%d bytes for TEXT", len(s))
			}
			return append(binary.LittleEndian.AppendUint16(nil, uint16(len(s))), s...), nil
		}
		if len(s) > c.maxBytes() {
			return nil, fmt.Errorf("%d bytes for a column of at most %d", len(s), c.maxBytes())
		}
		if c.maxBytes() > 255 {
			return append(binary.LittleEndian.AppendUint16(nil, uint16(len(s))), s...), nil
		}
		return append([]byte{byte(len(s))}, s...), nil
	case DateTime:
		t, ok := v.(time.Time)
		if !ok {
			return nil, fmt.Errorf("%T for DATETIME: want time.Time", v)
		}
		return encodeDateTime2(t, c.Fsp), nil
	case JSONType:
		var doc []byte
		switch x := v.(type) {
		case JSON:
			var err error
			if doc, err = EncodeJSON(string(x)); err != nil {
				return nil, err
			}
		case []byte: // already MySQL binary JSON
			doc = x
		default:
			return nil, fmt.Errorf("%T for JSON: want mysqlprimary.JSON text or []byte binary JSON", v)
		}
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(doc))), doc...), nil
	}
	return nil, fmt.Errorf("unknown column type %d", c.Type)
}

// encodeDateTime2 is MySQL's DATETIME2 format: 5 bytes big-endian of
// sign, year*13+month, day, hour, minute, second, then ceil(fsp/2) bytes of
// fraction.
func encodeDateTime2(t time.Time, fsp int) []byte {
	ym := uint64(t.Year()*13 + int(t.Month()))
	ymd := ym<<5 | uint64(t.Day())
	hms := uint64(t.Hour())<<12 | uint64(t.Minute())<<6 | uint64(t.Second())
	packed := (ymd<<17 | hms) + 0x8000000000
	b := []byte{byte(packed >> 32), byte(packed >> 24), byte(packed >> 16), byte(packed >> 8), byte(packed)}
	micro := t.Nanosecond() / 1000
	switch fsp {
	case 1, 2:
		b = append(b, byte(micro/10000))
	case 3, 4:
		f := micro / 100
		b = append(b, byte(f>>8), byte(f))
	case 5, 6:
		b = append(b, byte(micro>>16), byte(micro>>8), byte(micro))
	}
	return b
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint32:
		return int64(x), nil
	case uint64:
		return int64(x), nil
	}
	return 0, fmt.Errorf("%T for an integer column", v)
}

func toBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return []byte(x), nil
	case []byte:
		return x, nil
	case JSON:
		return []byte(x), nil
	}
	return nil, fmt.Errorf("%T for a string column", v)
}
