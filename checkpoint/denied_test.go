package checkpoint_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A store user without a privilege it needs is told the GRANT, naming its
// account and the store's database: whether the server refuses a
// statement (1142) or the connection itself (1044).
func TestAStoreUserWithoutGrantsIsToldTheGrant(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	srv.Exec(t, "CREATE USER 'cp_ro'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON `"+name+"`.* TO 'cp_ro'@'%'",
		"CREATE USER 'cp_none'@'%' IDENTIFIED BY 'pw'")
	for _, user := range []string{"cp_ro", "cp_none"} {
		t.Run(user, func(t *testing.T) {
			db, err := checkpoint.OpenDB(fmt.Sprintf("%s:pw@tcp(127.0.0.1:%d)/%s", user, srv.Port, name))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = checkpoint.OpenMySQL(context.Background(), db, "", nil)
			want := fmt.Sprintf("GRANT %s ON `%s`.* TO '%s'@'%%';", checkpoint.StoreGrants, name, user)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("OpenMySQL as %s: %v\nwant it to name %s", user, err, want)
			}
		})
	}
}
