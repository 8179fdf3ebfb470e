// Package tlstest makes certificate authorities and the certificates they
// sign, written as PEM files, for tests of TLS and mutual TLS.
//
// It starts no goroutines; files go to the directory the test gives.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority whose certificate is written to File.
type CA struct {
	Dir  string            // where its files go
	File string            // PEM of the CA certificate
	Cert *x509.Certificate // the CA certificate
	Pool *x509.CertPool    // holding Cert only
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a CA called name and writes its certificate to dir/name.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".pem")
	WritePEM(t, file, "CERTIFICATE", der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Dir: dir, File: file, Cert: cert, Pool: pool, key: key}
}

// Issue signs a certificate for name with the given DNS names, IP
// addresses and extended key usage, and writes it and its key to
// Dir/name.pem and Dir/name-key.pem; it returns the two file names.
func (ca *CA) Issue(t testing.TB, name string, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.Dir, name+".pem"), filepath.Join(ca.Dir, name+"-key.pem")
	WritePEM(t, certFile, "CERTIFICATE", der)
	WritePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// Server issues a server certificate for 127.0.0.1, ::1, localhost and
// the given names, and returns its files.
func (ca *CA) Server(t testing.TB, name string, dns ...string) (certFile, keyFile string) {
	t.Helper()
	return ca.Issue(t, name, append([]string{"localhost"}, dns...), []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, x509.ExtKeyUsageServerAuth)
}

// ServerConfig is a server TLS config with a certificate from Server.
func (ca *CA) ServerConfig(t testing.TB, dns ...string) *tls.Config {
	t.Helper()
	certFile, keyFile := ca.Server(t, "server", dns...)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// ClientCert issues a client certificate and returns it loaded, and its
// files.
func (ca *CA) ClientCert(t testing.TB, name string) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = ca.Issue(t, name, nil, nil, x509.ExtKeyUsageClientAuth)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert, certFile, keyFile
}

// WritePEM writes one PEM block to file.
func WritePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
