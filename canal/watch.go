package canal

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/event"
)

// Watched is a table, not an outbox table, whose row changes the reader
// hands on with their transaction (event.Txn.Changes): every INSERT, UPDATE
// and DELETE, read from the same stream as the outbox rows.
type Watched struct {
	Schema string
	Name   string
}

// FullName is "schema.table".
func (w Watched) FullName() string { return w.Schema + "." + w.Name }

// watchedTable returns the "schema.table" name of the watched table a
// TABLE_MAP event names, or "". It does not allocate.
func (r *Reader) watchedTable(e *replication.TableMapEvent) string {
	return r.watch[string(e.Schema)][string(e.Table)]
}

// watchMap is a TABLE_MAP event of a watched table with what is needed to
// turn its rows into event.Change rows.
type watchMap struct {
	name  string
	cols  []string
	types []byte
	dec   []int8           // fractional digits of DATETIME/TIMESTAMP columns, -1 for others
	enums map[int][]string // ENUM column -> its values
	sets  map[int][]string // SET column -> its values
}

// watchTableMap records the TABLE_MAP event of a watched table, if e is one.
func (r *Reader) watchTableMap(st *txnState, e *replication.TableMapEvent) error {
	name := r.watchedTable(e)
	if name == "" {
		return nil
	}
	cols := e.ColumnNameString()
	if len(cols) == 0 {
		return fmt.Errorf("%w: watched %v", errFatal, missingMetadata(name))
	}
	if len(cols) != len(e.ColumnType) {
		return fmt.Errorf("%w: watched table %s: the binlog names %d columns of %d", errFatal, name, len(cols), len(e.ColumnType))
	}
	wm := &watchMap{
		name:  name,
		cols:  cols,
		types: e.ColumnType,
		dec:   temporalDigits(e),
		enums: e.EnumStrValueMap(),
		sets:  e.SetStrValueMap(),
	}
	if st.watched == nil {
		st.watched = map[uint64]*watchMap{}
	}
	st.watched[e.TableID] = wm
	return nil
}

// temporalDigits is, for each column of e, the fractional digits a
// DATETIME or TIMESTAMP value is printed with, -1 for other columns.
func temporalDigits(e *replication.TableMapEvent) []int8 {
	dec := make([]int8, len(e.ColumnType))
	for i, typ := range e.ColumnType {
		switch typ {
		case mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP2:
			dec[i] = int8(min(e.ColumnMeta[i], 6))
		case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
			dec[i] = 0
		default:
			dec[i] = -1
		}
	}
	return dec
}

// addChanges appends the rows of a rows event of a watched table to the
// transaction in progress: an UPDATE's after images (each with its before
// image), a DELETE's before images, an INSERT's rows.
func (wm *watchMap) addChanges(st *txnState, e *replication.RowsEvent) error {
	var op event.ChangeOp
	first, step := 0, 1
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
		op = event.Insert
	case replication.EnumRowsEventTypeDelete:
		op = event.Delete
	case replication.EnumRowsEventTypeUpdate:
		op = event.Update
		first, step = 1, 2 // before and after images alternate
	default:
		return fmt.Errorf("%w: watched table %s: a rows event of type %s, not a full insert, update or delete; set binlog_row_value_options='' (no partial JSON updates) on the server", errFatal, wm.name, e.Type())
	}
	for i, skips := range e.SkippedColumns {
		if len(skips) > 0 {
			return fmt.Errorf("%w: watched table %s: the binlog row image lacks %d of its columns; set binlog_row_image=FULL on the server and restart the relay (rows written before that cannot be read whole)", errFatal, wm.name, len(e.SkippedColumns[i]))
		}
	}
	for i := first; i < len(e.Rows); i += step {
		m, err := wm.row(e.Rows[i])
		if err != nil {
			return err
		}
		c := event.Change{Table: wm.name, Op: op, Row: m}
		if op == event.Update {
			if c.Before, err = wm.row(e.Rows[i-1]); err != nil {
				return err
			}
		}
		st.changes = append(st.changes, c)
	}
	return nil
}

// row is one decoded row image keyed by column name, its values normalized.
func (wm *watchMap) row(row []any) (map[string]any, error) {
	if len(row) != len(wm.cols) {
		return nil, fmt.Errorf("%w: watched table %s: a row has %d columns, its table map %d", errFatal, wm.name, len(row), len(wm.cols))
	}
	m := make(map[string]any, len(row))
	for c, v := range row {
		m[wm.cols[c]] = wm.value(c, v)
	}
	return m, nil
}

// value normalizes column c's decoded value v (see event.Change.Row).
func (wm *watchMap) value(c int, v any) any {
	if v == nil {
		return nil
	}
	if n, ok := v.(int64); ok {
		if names, ok := wm.enums[c]; ok {
			if n >= 1 && int(n) <= len(names) {
				return names[n-1]
			}
			return "" // the empty string MySQL stores for an invalid value
		}
		if names, ok := wm.sets[c]; ok {
			var picked []string
			for b, name := range names {
				if n&(1<<b) != 0 {
					picked = append(picked, name)
				}
			}
			return strings.Join(picked, ",")
		}
	}
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case int:
		if wm.types[c] == mysql.MYSQL_TYPE_YEAR {
			return fmt.Sprintf("%04d", x)
		}
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return x
	case float32:
		// Through its shortest decimal form, so FLOAT 1.1 is 1.1, not
		// 1.100000023841858.
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f
	case float64:
		return x
	case string:
		return strings.Clone(x) // go-mysql's strings may share the event's buffer
	case []byte:
		return string(x)
	case time.Time:
		if d := wm.dec[c]; d >= 0 {
			return x.Format(fracTimeFormat[d])
		}
		return x.Format(fracTimeFormat[0])
	case fmt.Stringer:
		return x.String() // a decimal.Decimal, were decimals decoded as such
	default:
		return fmt.Sprint(x)
	}
}
