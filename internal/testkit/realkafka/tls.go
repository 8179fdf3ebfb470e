package realkafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs is a throwaway PKI for TLS listeners: a CA, a broker certificate for
// the loopback addresses (127.0.0.1, ::1, localhost) and a client
// certificate, all signed by the CA, written as PEM files that a broker
// reads directly (ssl.keystore.type=PEM, ssl.truststore.type=PEM).
type Certs struct {
	CAFile         string // the CA certificate (a broker's truststore, a client's root)
	KeystoreFile   string // broker: unencrypted PKCS#8 private key followed by its certificate chain
	ClientCertFile string // a client certificate (CN=client) for mutual TLS
	ClientKeyFile  string

	pool   *x509.CertPool
	client tls.Certificate
}

// NewCerts generates the CA and certificates into dir (created if needed),
// valid for a day. hosts are extra DNS names or IPs for the broker
// certificate, for a broker advertised under another name.
func NewCerts(dir string, hosts ...string) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mirrord realkafka test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("certs: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("certs: CA: %w", err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, names []string) (der []byte, key *ecdsa.PrivateKey, err error) {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, n)
			}
		}
		der, err = x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
		return der, key, err
	}
	brokerDER, brokerKey, err := leaf(2, "broker", x509.ExtKeyUsageServerAuth, append([]string{"127.0.0.1", "::1", "localhost"}, hosts...))
	if err != nil {
		return nil, fmt.Errorf("certs: broker: %w", err)
	}
	clientDER, clientKey, err := leaf(3, "client", x509.ExtKeyUsageClientAuth, nil)
	if err != nil {
		return nil, fmt.Errorf("certs: client: %w", err)
	}
	c := &Certs{
		CAFile:         filepath.Join(dir, "ca.pem"),
		KeystoreFile:   filepath.Join(dir, "broker-keystore.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	caPEM := pemBlock("CERTIFICATE", caDER)
	brokerKeyPEM, err := pkcs8PEM(brokerKey)
	if err != nil {
		return nil, err
	}
	clientKeyPEM, err := pkcs8PEM(clientKey)
	if err != nil {
		return nil, err
	}
	clientPEM := pemBlock("CERTIFICATE", clientDER)
	files := map[string][]byte{
		c.CAFile:         caPEM,
		c.KeystoreFile:   append(append(brokerKeyPEM, pemBlock("CERTIFICATE", brokerDER)...), caPEM...),
		c.ClientCertFile: clientPEM,
		c.ClientKeyFile:  clientKeyPEM,
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
	}
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	c.client, err = tls.X509KeyPair(clientPEM, clientKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: client pair: %w", err)
	}
	return c, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pkcs8PEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// ClientTLS is a client configuration that trusts the CA and presents the
// client certificate (which a listener with ssl.client.auth=required asks
// for).
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.pool, Certificates: []tls.Certificate{c.client}, MinVersion: tls.VersionTLS12}
}

// listenerProps are the SSL settings of a listener that uses c.
func (c *Certs) listenerProps() (map[string]string, error) {
	if c == nil || c.KeystoreFile == "" {
		return nil, errors.New("needs TLS certificates (Listener.TLS, from NewCerts)")
	}
	return map[string]string{
		"ssl.keystore.type":       "PEM",
		"ssl.keystore.location":   c.KeystoreFile,
		"ssl.truststore.type":     "PEM",
		"ssl.truststore.location": c.CAFile,
	}, nil
}
