package canal

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// go-mysql logs its syncer's whole config, password included, at Info when
// the syncer is created: through LibraryLogger that is a Debug record
// without the config, and go-mysql's warnings stay warnings.
func TestLibraryLoggerDemotesInfoAndDropsTheSyncerConfig(t *testing.T) {
	var b bytes.Buffer
	log := LibraryLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.Info("create BinlogSyncer", slog.Any("config", replication.BinlogSyncerConfig{User: "relay", Password: "PLANTED-pw"}))
	log.Warn("retry sync is disabled")
	out := b.String()
	if strings.Contains(out, "PLANTED-pw") {
		t.Errorf("the syncer's password was logged:\n%s", out)
	}
	if !strings.Contains(out, `level=DEBUG msg="create BinlogSyncer"`) || !strings.Contains(out, `level=WARN msg="retry sync is disabled"`) || !strings.Contains(out, "component=go-mysql") {
		t.Errorf("want the Info record at Debug and the warning at Warn, tagged go-mysql:\n%s", out)
	}
}
