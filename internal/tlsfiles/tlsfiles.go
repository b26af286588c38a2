// Package tlsfiles builds a client tls.Config from the files an operator
// names in a config (CA bundle, client certificate and key), for every
// connection outbox-relay makes: the source server and the Kafka brokers.
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
