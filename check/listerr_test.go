package check

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	driver "github.com/go-sql-driver/mysql"
)

// A server that cannot list its replicas (Dolt has no SHOW REPLICAS) gets a
// WARN whose fix is not a GRANT; one that refuses for lack of a privilege
// gets the GRANT.
func TestServerIDDecisionWhenReplicasCannotBeListed(t *testing.T) {
	s := server{flavor: flavorMySQL, user: "'relay'@'%'"}
	cases := []struct {
		name     string
		err      error
		fix      string
		notInFix string
	}{
		{"the statement is not supported", fmt.Errorf("SHOW REPLICAS: %w", &driver.MySQLError{Number: 1105, Message: "unsupported feature: SHOW REPLICAS"}),
			"this server cannot list its replicas", "GRANT"},
		{"a privilege is missing (MySQL)", fmt.Errorf("SHOW REPLICAS: %w", &driver.MySQLError{Number: 1227, Message: "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s)"}),
			"GRANT REPLICATION SLAVE ON *.* TO 'relay'@'%';", "cannot list"},
		{"a privilege is missing (Dolt)", fmt.Errorf("SHOW REPLICAS: %w", &driver.MySQLError{Number: 1105, Message: "command denied to user 'relay'@'%'"}),
			"GRANT REPLICATION SLAVE", "cannot list"},
		{"a network error", errors.New("connection reset"), "GRANT REPLICATION SLAVE", "cannot list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := serverIDDecision(idRange{100, 1}, 1, nil, c.err, "relayhost", false, s)
			if r.Status != Warn || !strings.Contains(r.Fix, c.fix) || strings.Contains(r.Fix, c.notInFix) {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}
