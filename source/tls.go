package source

import (
	"crypto/tls"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
)

// TLSConfig returns the tls.Config of source.tls for host, or nil when TLS
// is off.
func TLSConfig(t config.TLS, host string) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	name := t.ServerName
	if name == "" {
		name = host
	}
	return tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ServerName: name, InsecureSkipVerify: t.InsecureSkipVerify}.Config("source.tls")
}
