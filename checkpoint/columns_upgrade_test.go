package checkpoint_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A key column of an earlier version in utf8mb4 (a collated character
// column of 255 characters, up to 1,020 bytes) holding multi-byte keys
// longer than the new VARBINARY(255) is upgraded byte-wise: each long key
// takes FitKey's form exactly (its first 238 bytes, even where they end
// inside a character, '#' and 16 hex digits of the SHA-256 of all of it),
// two alike in their first bytes stay apart, and each row is then found
// by FitKey of its key, as the relay looks keys up from then on.
func TestUpgradeTableCutsLongUTF8KeysAsBytes(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE side (name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, n INT NOT NULL) " +
		"ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"); err != nil {
		t.Fatal(err)
	}
	keys := []string{
		"short",
		strings.Repeat("🙂", 60),                            // 60 characters, 240 bytes
		strings.Repeat("🙂", 255),                           // 1,020 bytes
		strings.Repeat("é", 120) + "a",                     // 241 bytes
		strings.Repeat("é", 120) + "b",                     // alike in the first 240
		strings.Repeat("a", 237) + "éxé",                   // 242 bytes: fits
		strings.Repeat("a", 237) + strings.Repeat("é", 10), // 257 bytes, cut inside an é
		strings.Repeat("é", 130),                           // 260 bytes, 130 characters
		strings.Repeat("x", 255),                           // 255 bytes: fits
	}
	for i, k := range keys {
		if _, err := db.Exec("INSERT INTO side VALUES (?, ?)", k, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkpoint.UpgradeTable(ctx, db, "side", "side", nil, checkpoint.KeyColumn{Name: "name", Size: 255}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM side").Scan(&n); err != nil || n != len(keys) {
		t.Fatalf("%d rows after the upgrade (%v), want %d", n, err, len(keys))
	}
	for i, k := range keys {
		want := checkpoint.FitKey(k, 255)
		var got int
		if err := db.QueryRow("SELECT n FROM side WHERE name = ?", []byte(want)).Scan(&got); err != nil || got != i {
			var stored []byte
			_ = db.QueryRow("SELECT name FROM side WHERE n = ?", i).Scan(&stored)
			t.Errorf("key %d (%d bytes): not found by FitKey's form %q (%v); the upgrade kept %d bytes %q", i, len(k), want, err, len(stored), stored)
		}
	}
}
