package relay_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// writeCerts makes a CA and a server certificate for 127.0.0.1 in dir.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outbox-relay test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// With source.tls, both the queries and the binlog stream use TLS: the
// relay's user is created REQUIRE SSL, so a plain connection is refused.
func TestSourceTLSCoversTheBinlogStream(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	tlsSrv := testserver.Start(t, testserver.Options{ServerID: 3, ExtraArgs: []string{"--ssl-ca=" + ca, "--ssl-cert=" + cert, "--ssl-key=" + key}})
	dbname := tlsSrv.NewDatabase(t)
	if _, err := tlsSrv.DB(t, dbname).Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	tlsSrv.Exec(t, "CREATE USER relay@'%' IDENTIFIED BY 'pw' REQUIRE SSL",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO relay@'%'",
		"GRANT SELECT ON "+dbname+".* TO relay@'%'")
	parse := func(tls string) *config.Config {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: relay, password: pw, server_id: %d, heartbeat: 1s, tls: %s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, tlsSrv.Port, testserver.ServerID(), tls, dbname, filepath.Join(t.TempDir(), "cp.json"))))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	plain := parse("{enabled: false}")
	err, _ := startRelay(t, plain, relay.Options{}).exited(time.Minute)
	if err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("without TLS: Run = %v, want access denied (the user requires SSL)", err)
	}

	cfg := parse(fmt.Sprintf("{enabled: true, ca_file: %q}", ca))
	out := &lines{}
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	if _, err := tlsSrv.DB(t, dbname).Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('tls-1', 'order', 'a', 'created', '{}')"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); len(out.events(t)) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay over TLS: %v", err)
	}
	if got := out.events(t); len(got) != 1 || got[0].ID != "tls-1" {
		t.Fatalf("over TLS the relay delivered %+v", got)
	}
}
