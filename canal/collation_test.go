package canal

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// A BINARY(16) id is found by its binary collation whether the table map
// lists collations for character columns only (MySQL) or for every column
// (Dolt, 0 for the others).
func TestBinaryCollationWithEitherCharsetLayout(t *testing.T) {
	// id BIGINT, ref BINARY(16), name VARCHAR(64)
	types := []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_VARCHAR}
	meta := []uint16{0, uint16(mysql.MYSQL_TYPE_STRING)<<8 | 16, 64 * 4}
	mysqlLayout := &replication.TableMapEvent{ColumnCount: 3, ColumnType: types, ColumnMeta: meta, ColumnCharset: []uint64{63, 255}}
	doltLayout := &replication.TableMapEvent{ColumnCount: 3, ColumnType: types, ColumnMeta: meta, ColumnCharset: []uint64{0, 63, 309}}
	for name, e := range map[string]*replication.TableMapEvent{"character columns only": mysqlLayout, "every column": doltLayout} {
		if !binaryCollation(e, 1) || binaryCollation(e, 2) {
			t.Errorf("%s: binary(ref) = %v, binary(name) = %v; want true, false", name, binaryCollation(e, 1), binaryCollation(e, 2))
		}
	}
}
