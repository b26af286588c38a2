package audit

import (
	"log/slog"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/source"
)

// Reader is the reader configuration of `outbox-relay audit`: the relay's
// own, on the first source server, with the next replica id after the
// pipelines' (it runs beside a relay).
func Reader(cfg *config.Config, info source.ServerInfo, log *slog.Logger) (canal.Config, error) {
	a := cfg.Source.Addrs()[0]
	tlsConfig, err := source.TLSConfig(cfg.Source.TLS, a.Host)
	if err != nil {
		return canal.Config{}, err
	}
	return canal.Config{Host: a.Host, Port: uint16(a.Port), User: cfg.Source.User, Password: cfg.Source.Password.Reveal(),
		ServerID: cfg.Source.ServerID + uint32(cfg.ReplicaIDs()), Flavor: info.Flavor, GTIDMode: info.GTIDMode,
		Tables: canal.TablesOf(cfg.Tables), TLS: tlsConfig, HeartbeatPeriod: cfg.Source.Heartbeat, ReadTimeout: cfg.Source.ReadTimeout,
		Retry: retry.FromConfig(cfg.Delivery).Within(0, cfg.Source.MaxReconnectBackoff), Logger: log}, nil
}
