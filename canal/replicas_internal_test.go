package canal

import (
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/position"
)

// The error a replica gets when another connects with its server_id is not
// retried, on either flavor; other 1236 errors remain a lost position.
func TestClassifySameServerID(t *testing.T) {
	for _, e := range []*mysql.MyError{
		{Code: 4052, Message: "A slave with the same server_uuid/server_id is already connected; the first event '.' at 0"},
		{Code: 1236, Message: "A slave with the same server_uuid/server_id as this slave has connected to the master; the first event 'binlog.000001' at 4"},
		{Code: 1236, Message: "A replica with the same server_uuid/server_id as this replica has connected to the source"},
	} {
		err := classify(e)
		if !errors.Is(err, ErrServerIDInUse) || !errors.Is(err, errFatal) || errors.Is(err, position.ErrLost) {
			t.Errorf("classify(%d %q) = %v, want ErrServerIDInUse (fatal)", e.Code, e.Message, err)
		}
	}
	if err := classify(&mysql.MyError{Code: 1236, Message: "Could not find first log file name in binary log index file"}); !errors.Is(err, position.ErrLost) || errors.Is(err, ErrServerIDInUse) {
		t.Errorf("a purged position = %v", err)
	}
}

// A server that ignored the GTID set a dump sent (Dolt) refuses the dump as
// "purged" when a commit is in flight: retried, not a lost position. The
// same words for a dump that sent no set, or another 1236, stay one.
func TestClassifyDumpIgnoredSetIsRetried(t *testing.T) {
	dolt := &mysql.MyError{Code: 1236, Message: "Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration period. The GTID set sent by the replica is '', and the missing transactions are '5f4e2ebf-8bcf-436b-8f77-085c4f6da819:39004'."}
	if err := classifyDump(dolt, "5f4e2ebf-8bcf-436b-8f77-085c4f6da819:1-39000"); errors.Is(err, position.ErrLost) || errors.Is(err, errFatal) {
		t.Errorf("a dump whose set the server ignored = %v, want retried", err)
	}
	if err := classifyDump(dolt, ""); !errors.Is(err, position.ErrLost) {
		t.Errorf("a dump that sent no set = %v, want a lost position", err)
	}
	purged := &mysql.MyError{Code: 1236, Message: "The GTID set sent by the replica is 'u:1-5', and the missing transactions are 'u:6'"}
	if err := classifyDump(purged, "u:1-5"); !errors.Is(err, position.ErrLost) {
		t.Errorf("a purged position = %v, want a lost position", err)
	}
}
