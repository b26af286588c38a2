package mysqlprimary

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
)

// Event types written here (MySQL's Log_event_type numbers).
const (
	evQuery             = byte(replication.QUERY_EVENT)
	evRotate            = byte(replication.ROTATE_EVENT)
	evFormatDescription = byte(replication.FORMAT_DESCRIPTION_EVENT)
	evXID               = byte(replication.XID_EVENT)
	evTableMap          = byte(replication.TABLE_MAP_EVENT)
	evHeartbeat         = byte(replication.HEARTBEAT_EVENT)
	evWriteRowsV2       = byte(replication.WRITE_ROWS_EVENTv2)
	evGTID              = byte(replication.GTID_EVENT)
	evAnonymousGTID     = byte(replication.ANONYMOUS_GTID_EVENT)
	evPreviousGTIDs     = byte(replication.PREVIOUS_GTIDS_EVENT)
	evXAPrepare         = byte(replication.XA_PREPARE_LOG_EVENT)
	evPayload           = byte(replication.TRANSACTION_PAYLOAD_EVENT)
	evHeartbeatV2       = byte(replication.HEARTBEAT_LOG_EVENT_V2)
	evGTIDTagged        = byte(replication.GTID_TAGGED_LOG_EVENT)
)

const (
	headerLen   = 19
	checksumLen = 4

	flagArtificial  = 0x20 // LOG_EVENT_ARTIFICIAL_F
	flagSuppressUse = 0x08 // LOG_EVENT_SUPPRESS_USE_F
)

// event is one binlog event before it has a position.
type event struct {
	typ      byte
	ts       uint32
	serverID uint32
	flags    uint16
	body     []byte
}

// size is the event's length on the wire and in the file.
func (e event) size(checksum bool) uint32 {
	n := headerLen + len(e.body)
	if checksum {
		n += checksumLen
	}
	return uint32(n)
}

// encode returns the event's bytes with logPos in its header (the position
// after the event in its file; 0 for artificial and nested events).
func (e event) encode(logPos uint32, checksum bool) []byte {
	n := e.size(checksum)
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, e.ts)
	b = append(b, e.typ)
	b = binary.LittleEndian.AppendUint32(b, e.serverID)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = binary.LittleEndian.AppendUint32(b, logPos)
	b = binary.LittleEndian.AppendUint16(b, e.flags)
	b = append(b, e.body...)
	if checksum {
		b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	}
	return b
}

// versionNumber turns "8.0.36" into 80036, as GTID events carry it.
func versionNumber(v string) uint32 {
	parts := strings.SplitN(strings.SplitN(v, "-", 2)[0], ".", 3)
	var n [3]uint32
	for i := 0; i < len(parts) && i < 3; i++ {
		x, _ := strconv.Atoi(parts[i])
		n[i] = uint32(x)
	}
	return n[0]*10000 + n[1]*100 + n[2]
}

// eventTypeCount is the number of event types the server's FORMAT_DESCRIPTION
// describes: 41 up to 8.0 (the last is HEARTBEAT_LOG_EVENT_V2), 42 from 8.1
// (GTID_TAGGED_LOG_EVENT, written by 8.3+).
func eventTypeCount(version string) int {
	if versionNumber(version) >= 80100 {
		return 42
	}
	return 41
}

// fdeBody is a MySQL 8 FORMAT_DESCRIPTION_EVENT body announcing CRC32
// checksums.
func fdeBody(version string, created uint32) []byte {
	n := eventTypeCount(version)
	// Post-header lengths of event types 1..41 as MySQL 8.0 writes them,
	// including its quirk of 40 (the type code) for TRANSACTION_PAYLOAD_EVENT.
	post := []byte{
		0, 13, 0, 8, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, byte(57 + n), 0, 4, 26, 8, 0,
		0, 0, 8, 8, 8, 2, 0, 0, 0, 10, 10, 10, 42, 42, 0, 18, 52, 0, 10, 40, 0,
	}
	for len(post) < n {
		post = append(post, 0)
	}
	b := binary.LittleEndian.AppendUint16(nil, 4)
	sv := make([]byte, 50)
	copy(sv, version)
	b = append(b, sv...)
	b = binary.LittleEndian.AppendUint32(b, created)
	b = append(b, headerLen)
	b = append(b, post...)
	return append(b, 1) // BINLOG_CHECKSUM_ALG_CRC32
}

func rotateBody(pos uint64, next string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, pos), next...)
}

// previousGTIDsBody encodes a GTID set as MySQL does in PREVIOUS_GTIDS (the
// tagged format when the set has tags).
func previousGTIDsBody(set *mysql.MysqlGTIDSet) []byte {
	return set.Encode()
}

// gtidInfo is what a GTID event says about its transaction.
type gtidInfo struct {
	anonymous      bool
	sid            uuid.UUID
	tag            string
	gno            int64
	flags          byte // 1: may contain statement-based events
	lastCommitted  int64
	sequenceNumber int64
	commitMicros   uint64 // immediate commit time, µs since epoch
	originalMicros uint64 // original commit time; 0 means the same
	serverVersion  uint32
	originalVer    uint32 // 0 means the same
	txnLength      uint64
}

func (g gtidInfo) String() string {
	if g.anonymous {
		return "ANONYMOUS"
	}
	if g.tag != "" {
		return fmt.Sprintf("%s:%s:%d", g.sid, g.tag, g.gno)
	}
	return fmt.Sprintf("%s:%d", g.sid, g.gno)
}

// gtidEvent returns the GTID event (GTID_LOG_EVENT, ANONYMOUS_GTID_LOG_EVENT or
// GTID_TAGGED_LOG_EVENT) for g, whose txnLength must already count the event.
func (g gtidInfo) event(ts, serverID uint32) event {
	if g.tag != "" {
		return event{typ: evGTIDTagged, ts: ts, serverID: serverID, body: g.taggedBody()}
	}
	typ := evGTID
	if g.anonymous {
		typ = evAnonymousGTID
	}
	return event{typ: typ, ts: ts, serverID: serverID, body: g.classicBody()}
}

func (g gtidInfo) classicBody() []byte {
	b := []byte{g.flags}
	if g.anonymous {
		b = append(b, make([]byte, 16)...)
		b = binary.LittleEndian.AppendUint64(b, 0)
	} else {
		b = append(b, g.sid[:]...)
		b = binary.LittleEndian.AppendUint64(b, uint64(g.gno))
	}
	b = append(b, 2) // LOGICAL_TIMESTAMP_TYPECODE
	b = binary.LittleEndian.AppendUint64(b, uint64(g.lastCommitted))
	b = binary.LittleEndian.AppendUint64(b, uint64(g.sequenceNumber))
	imm := g.commitMicros
	if g.originalMicros != 0 && g.originalMicros != g.commitMicros {
		b = appendUint56(b, imm|1<<55)
		b = appendUint56(b, g.originalMicros)
	} else {
		b = appendUint56(b, imm)
	}
	b = append(b, mysql.PutLengthEncodedInt(g.txnLength)...)
	if g.originalVer != 0 && g.originalVer != g.serverVersion {
		b = binary.LittleEndian.AppendUint32(b, g.serverVersion|1<<31)
		b = binary.LittleEndian.AppendUint32(b, g.originalVer)
	} else {
		b = binary.LittleEndian.AppendUint32(b, g.serverVersion)
	}
	return b
}

func appendUint56(b []byte, v uint64) []byte {
	var x [8]byte
	binary.LittleEndian.PutUint64(x[:], v)
	return append(b, x[:7]...)
}

// taggedBody is GTID_TAGGED_LOG_EVENT's body in the mysql::serialization
// format: a message of version 1, its size, the last non-ignorable field, then
// (field id, value) pairs; optional fields equal to their default are left out.
func (g gtidInfo) taggedBody() []byte {
	var f []byte
	field := func(id int, v []byte) {
		f = append(f, serialUint(uint64(id))...)
		f = append(f, v...)
	}
	field(0, serialUint(uint64(g.flags)))
	var u []byte
	for _, c := range g.sid {
		u = append(u, serialUint(uint64(c))...)
	}
	field(1, u)
	field(2, serialInt(g.gno))
	field(3, append(serialUint(uint64(len(g.tag))), g.tag...))
	field(4, serialInt(g.lastCommitted))
	field(5, serialInt(g.sequenceNumber))
	field(6, serialUint(g.commitMicros))
	if g.originalMicros != 0 && g.originalMicros != g.commitMicros {
		field(7, serialUint(g.originalMicros))
	}
	field(8, serialUint(g.txnLength))
	field(9, serialUint(uint64(g.serverVersion)))
	if g.originalVer != 0 && g.originalVer != g.serverVersion {
		field(10, serialUint(uint64(g.originalVer)))
	}
	version := serialUint(1)
	last := serialUint(0) // last non-ignorable field id
	rest := len(version) + len(last) + len(f)
	sizeLen := 1
	for len(serialUint(uint64(rest+sizeLen))) != sizeLen {
		sizeLen++
	}
	b := append(version, serialUint(uint64(rest+sizeLen))...)
	b = append(b, last...)
	return append(b, f...)
}

// serialUint is mysql::serialization's variable-length unsigned integer: the
// number of trailing one bits of the first byte plus one is the length in
// bytes, the value follows those bits, little-endian.
func serialUint(v uint64) []byte {
	for n := 1; n <= 8; n++ {
		if n == 8 && v >= 1<<56 {
			break
		}
		if n < 8 && v >= 1<<(7*n) {
			continue
		}
		t := v<<n | (1<<(n-1) - 1)
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], t)
		return append([]byte(nil), x[:n]...)
	}
	return append([]byte{0xff}, binary.LittleEndian.AppendUint64(nil, v)...)
}

// serialInt is the signed variant: the sign goes in the lowest value bit.
func serialInt(v int64) []byte {
	if v >= 0 {
		return serialUint(uint64(v) << 1)
	}
	return serialUint(uint64(-(v+1))<<1 | 1)
}

// queryStatusVars are the status variables MySQL 8 writes in a query event:
// flags2, sql_mode (empty here), catalog, charsets (utf8mb4_0900_ai_ci) and
// the default utf8mb4 collation.
func queryStatusVars() []byte {
	var b []byte
	b = append(b, 0) // Q_FLAGS2_CODE
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, 1) // Q_SQL_MODE_CODE
	b = binary.LittleEndian.AppendUint64(b, 0)
	b = append(b, 6, 3) // Q_CATALOG_NZ_CODE "std"
	b = append(b, "std"...)
	b = append(b, 4) // Q_CHARSET_CODE: client, connection, server
	b = binary.LittleEndian.AppendUint16(b, 255)
	b = binary.LittleEndian.AppendUint16(b, 255)
	b = binary.LittleEndian.AppendUint16(b, 255)
	b = append(b, 18) // Q_DEFAULT_COLLATION_FOR_UTF8MB4
	b = binary.LittleEndian.AppendUint16(b, 255)
	return b
}

func queryBody(threadID uint32, schema, query string) []byte {
	sv := queryStatusVars()
	b := binary.LittleEndian.AppendUint32(nil, threadID)
	b = binary.LittleEndian.AppendUint32(b, 0) // execution time
	b = append(b, byte(len(schema)))
	b = binary.LittleEndian.AppendUint16(b, 0) // error code
	b = binary.LittleEndian.AppendUint16(b, uint16(len(sv)))
	b = append(b, sv...)
	b = append(b, schema...)
	b = append(b, 0)
	return append(b, query...)
}

func xidBody(xid uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, xid)
}

// xaPrepareBody is XA_PREPARE_LOG_EVENT: one_phase, formatID, gtrid and bqual
// lengths, then their bytes.
func xaPrepareBody(onePhase bool, x XID) []byte {
	b := []byte{0}
	if onePhase {
		b[0] = 1
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(x.FormatID))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.GTRID)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.BQual)))
	b = append(b, x.GTRID...)
	return append(b, x.BQual...)
}

// heartbeatV2Body is HEARTBEAT_LOG_EVENT_V2's TLV body.
func heartbeatV2Body(file string, pos uint64) []byte {
	var b []byte
	b = append(b, mysql.PutLengthEncodedInt(1)...) // OTW_HB_LOG_FILENAME_FIELD
	b = append(b, mysql.PutLengthEncodedInt(uint64(len(file)))...)
	b = append(b, file...)
	p := mysql.PutLengthEncodedInt(pos)
	b = append(b, mysql.PutLengthEncodedInt(2)...) // OTW_HB_LOG_POSITION_FIELD
	b = append(b, mysql.PutLengthEncodedInt(uint64(len(p)))...)
	b = append(b, p...)
	return append(b, 0) // OTW_HB_HEADER_END_MARK
}

// payloadBody is TRANSACTION_PAYLOAD_EVENT: compression type, uncompressed
// size and payload size as (type, length, value) with length-encoded
// integers, an end mark, then the zstd frame.
func payloadBody(compressed []byte, uncompressed int) []byte {
	var b []byte
	tlv := func(typ, v uint64) {
		enc := mysql.PutLengthEncodedInt(v)
		b = append(b, mysql.PutLengthEncodedInt(typ)...)
		b = append(b, mysql.PutLengthEncodedInt(uint64(len(enc)))...)
		b = append(b, enc...)
	}
	tlv(2, 0) // OTW_PAYLOAD_COMPRESSION_TYPE_FIELD: ZSTD
	tlv(3, uint64(uncompressed))
	tlv(1, uint64(len(compressed))) // OTW_PAYLOAD_SIZE_FIELD
	b = append(b, 0)                // OTW_PAYLOAD_HEADER_END_MARK
	return append(b, compressed...)
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
