package canal

import (
	"errors"
	"strings"
)

// ErrServerIDInUse is returned by Run when the server dropped the reader's
// stream because another replica connected with the same server_id (MariaDB
// error 4052, MySQL error 1236 "A slave with the same server_uuid/server_id
// …"). It is not retried: reconnecting would drop the other one in turn, and
// the two would take turns forever.
var ErrServerIDInUse = errors.New("another replica connected with this relay's server_id")

// isSameServerID reports whether a server error is the one a replica gets
// when another one connects with its server_id.
func isSameServerID(code uint16, msg string) bool {
	return code == 4052 || (code == 1236 && strings.Contains(msg, "same server_uuid/server_id"))
}

// ServerID is the replica id the reader connects with.
func (r *Reader) ServerID() uint32 { return r.cfg.ServerID }
