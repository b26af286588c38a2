// Package tlsfiles builds a client tls.Config from the files an operator
// names in a config (CA bundle, client certificate and key), for every
// connection outbox-relay makes: the source server and every sink; Settings
// is the `tls:` block every sink config shares.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Files are the TLS settings of one connection.
type Files struct {
	CAFile, CertFile, KeyFile string
	ServerName                string
	InsecureSkipVerify        bool
}

// Config builds the tls.Config. prefix names the config section in errors
// (e.g. "kafka.tls").
func (f Files) Config(prefix string) (*tls.Config, error) {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         f.ServerName,
		InsecureSkipVerify: f.InsecureSkipVerify, //nolint:gosec // the operator's explicit choice
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: %q holds no PEM certificate", prefix, f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: load cert_file %q and key_file %q: %w", prefix, f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Settings is the `tls:` block of a destination's config (every sink has
// one), with its YAML keys; Build turns it into a tls.Config.
type Settings struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of CAs to trust. Default "" (the system pool).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and key, for mutual
	// TLS. Default "" (no client certificate); both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// InsecureSkipVerify disables verification of the server's
	// certificate. Default false; never in production.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// ServerName overrides the name verified in the server's certificate.
	// Default "" (the host connected to).
	ServerName string `yaml:"server_name"`
}

// Build returns the tls.Config, or nil when TLS is off. prefix names the
// config section in errors (e.g. "nats.tls").
func (s Settings) Build(prefix string) (*tls.Config, error) {
	if !s.Enabled {
		return nil, nil
	}
	return Files{CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile,
		ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify}.Config(prefix)
}
