package canal

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// rotateEvent builds a ROTATE event to name, with a CRC32 trailer or not,
// and parses it as go-mysql does: before it has seen a FORMAT_DESCRIPTION
// the trailer, if any, is read as part of the name; after one that
// announces checksums (stripped) it is cut off first.
func rotateEvent(t *testing.T, name string, checksum, stripped bool) (*replication.BinlogEvent, *replication.RotateEvent) {
	body := binary.LittleEndian.AppendUint64(nil, 4)
	body = append(body, name...)
	size := replication.EventHeaderSize + len(body)
	if checksum {
		size += 4
	}
	h := make([]byte, replication.EventHeaderSize)
	h[4] = byte(replication.ROTATE_EVENT)
	binary.LittleEndian.PutUint32(h[9:], uint32(size))
	raw := append(h, body...)
	if checksum {
		raw = binary.LittleEndian.AppendUint32(raw, crc32.ChecksumIEEE(raw))
	}
	data := raw[replication.EventHeaderSize:]
	if stripped {
		data = data[:len(data)-4]
	}
	e := &replication.RotateEvent{}
	if err := e.Decode(data); err != nil {
		t.Fatal(err)
	}
	return &replication.BinlogEvent{RawData: raw, Event: e}, e
}

func TestRotateNameDropsAChecksumReadAsPartOfTheName(t *testing.T) {
	cases := []struct {
		name               string
		checksum, stripped bool
	}{
		{"an artificial rotate without a checksum (MySQL)", false, false},
		{"an artificial rotate with its checksum (Dolt)", true, false},
		{"a rotate whose checksum go-mysql already cut off", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, e := rotateEvent(t, "binlog-main.000001", c.checksum, c.stripped)
			if got := rotateName(ev, e); got != "binlog-main.000001" {
				t.Errorf("rotateName = %q, want binlog-main.000001", got)
			}
		})
	}
}
