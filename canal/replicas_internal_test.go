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
