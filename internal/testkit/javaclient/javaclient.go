// Package javaclient is an independent Kafka client for mirrord's real test
// tier (DESIGN §11): the reference Java client, org.apache.kafka:kafka-clients
// of the version the tier pins (realkafka.Kafka4), producing and consuming,
// so that what a mirror holds is judged by a client other than franz-go.
//
// The Java side is a small Maven project in this directory (pom.xml and
// src/main/java), embedded in the Go package. Build copies it into the
// realkafka cache (javaclient/<hash of the sources>/) and runs
// `mvn -B -q package dependency:copy-dependencies` there once per machine
// and source version, under the cache's file lock; later builds, in any
// process, find the completed directory and run no Maven. Produce and
// Consume run `java -cp` and read the JSON lines the program prints.
//
//   - Produce: one idempotent producer (enable.idempotence=true, acks=all)
//     per compression type, then a transactional producer whose
//     transactions span partitions and topics, some aborted; it returns every
//     record sent with its offset and whether it was committed or aborted.
//   - Consume: isolation.level=read_committed, check.crcs=true, from the
//     beginning to the end offsets the topics had when it started; it
//     returns every record with its offset, timestamp and timestamp type.
//     With a Group, as a member of that consumer group, from its committed
//     offsets, committing what it read before it leaves.
//   - ShareConsume: as a member of a share group (KafkaShareConsumer,
//     explicit acknowledgement), every record accepted, until it read a
//     given number of distinct records.
//
// Invariants: the Java program only reads and writes the topics it is
// given (they must exist); every JVM it starts is waited for before Produce
// or Consume returns, and is killed (its process group) when ctx ends. No
// goroutines outlive a call.
package javaclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

//go:embed pom.xml src
var project embed.FS

// Client is the built Java client.
type Client struct {
	java string
	dir  string // the build directory in the cache
}

// Build builds the Java client (once per machine and source version) and
// returns it. It needs java and, unless the build is cached, mvn.
func Build(ctx context.Context) (*Client, error) {
	java, err := realkafka.Java(ctx)
	if err != nil {
		return nil, err
	}
	key, err := sourceHash()
	if err != nil {
		return nil, err
	}
	dir, err := realkafka.Cached(ctx, "javaclient", key, build)
	if err != nil {
		return nil, err
	}
	return &Client{java: java, dir: dir}, nil
}

// sourceHash is the cache key: a hash of every embedded file.
func sourceHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(project, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := project.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("javaclient sources: %w", err)
	}
	return "kafka-clients-" + realkafka.Kafka4 + "-" + hex.EncodeToString(h.Sum(nil)[:6]), nil
}

func build(ctx context.Context, dir string) error {
	err := fs.WalkDir(project, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := project.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("javaclient: copy sources: %w", err)
	}
	log := filepath.Join(dir, "build.log")
	err = realkafka.RunMaven(ctx, dir, log, "-B", "-q", "-f", "pom.xml", "package",
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(dir, "libs"))
	if me, ok := errors.AsType[*realkafka.MavenError](err); ok {
		me.What = "build the Java client (org.apache.kafka:kafka-clients:" + realkafka.Kafka4 + ")"
	}
	return err
}

// classpath is the java -cp argument.
func (c *Client) classpath() string {
	return filepath.Join(c.dir, "target", "javaclient.jar") + string(os.PathListSeparator) + filepath.Join(c.dir, "libs", "*")
}

// Header is a record header; a nil Value is a null header value.
type Header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// Record is one record the Java client produced or consumed. Key and Value
// are nil for null.
type Record struct {
	Status        string   `json:"status,omitempty"`   // produce: "committed" or "aborted"
	Producer      string   `json:"producer,omitempty"` // produce: "idempotent-<codec>" or "transactional"
	Topic         string   `json:"topic"`
	Partition     int32    `json:"partition"`
	Offset        int64    `json:"offset"`
	Timestamp     int64    `json:"timestamp"`                // milliseconds
	TimestampType string   `json:"timestamp_type,omitempty"` // consume: "CreateTime" or "LogAppendTime"
	Key           []byte   `json:"key"`
	Value         []byte   `json:"value"`
	Headers       []Header `json:"headers"`
}

// Committed reports whether a produced record was committed.
func (r Record) Committed() bool { return r.Status == "committed" }

// ProduceConfig says what Produce writes. Zero fields take the defaults in
// brackets.
type ProduceConfig struct {
	Bootstrap []string // bootstrap servers (required)
	Topics    []string // existing topics, written round-robin over their partitions (required)
	// Records per idempotent producer [100]; negative: no idempotent producers.
	Records int
	// Compression types, one idempotent producer each [none gzip snappy lz4 zstd].
	Compression []string
	// Transactions of the transactional producer [10], each of TxnRecords
	// records [6] spread over the topics and partitions; every AbortEvery-th
	// is aborted [3]. Negative Transactions: no transactional producer.
	Transactions, TxnRecords, AbortEvery int
	TransactionalID                      string            // [mirrord-javaclient-<random>]
	Props                                map[string]string // more producer properties (security.protocol, sasl.*, ssl.*)
}

// ConsumeConfig says what Consume reads.
type ConsumeConfig struct {
	Bootstrap []string          // required
	Topics    []string          // required
	Timeout   time.Duration     // to reach the end offsets [60s]
	Props     map[string]string // more consumer properties
	// Group, when set, makes Consume a member of that consumer group
	// (subscribe, auto commit off): it reads from the group's committed
	// offsets (the earliest where none) to the end offsets as of its
	// assignment or, with Max, until it read Max records and one of every
	// partition not at its end; then it commits the offset after the last
	// record it returned of each partition and leaves the group.
	Group string
	Max   int
}

// Produce runs the Java producers and returns every record they sent, in
// the order each producer sent them.
func (c *Client) Produce(ctx context.Context, cfg ProduceConfig) ([]Record, error) {
	if len(cfg.Bootstrap) == 0 || len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("javaclient produce: bootstrap servers and topics are required")
	}
	args := []string{"produce", "--bootstrap=" + strings.Join(cfg.Bootstrap, ","), "--topics=" + strings.Join(cfg.Topics, ",")}
	num := func(name string, v int) {
		switch {
		case v < 0:
			args = append(args, "--"+name+"=0")
		case v > 0:
			args = append(args, fmt.Sprintf("--%s=%d", name, v))
		}
	}
	num("records", cfg.Records)
	num("transactions", cfg.Transactions)
	num("txn-records", cfg.TxnRecords)
	num("abort-every", cfg.AbortEvery)
	if len(cfg.Compression) > 0 {
		args = append(args, "--compression="+strings.Join(cfg.Compression, ","))
	}
	if cfg.TransactionalID != "" {
		args = append(args, "--transactional-id="+cfg.TransactionalID)
	}
	return c.run(ctx, append(args, props(cfg.Props)...))
}

// Consume reads the topics read_committed to their end offsets as of its
// start and returns every record, in offset order per partition.
func (c *Client) Consume(ctx context.Context, cfg ConsumeConfig) ([]Record, error) {
	if len(cfg.Bootstrap) == 0 || len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("javaclient consume: bootstrap servers and topics are required")
	}
	args := []string{"consume", "--bootstrap=" + strings.Join(cfg.Bootstrap, ","), "--topics=" + strings.Join(cfg.Topics, ",")}
	if cfg.Timeout > 0 {
		args = append(args, fmt.Sprintf("--timeout-ms=%d", cfg.Timeout.Milliseconds()))
	}
	if cfg.Group != "" {
		args = append(args, "--group="+cfg.Group)
		if cfg.Max > 0 {
			args = append(args, fmt.Sprintf("--max=%d", cfg.Max))
		}
	}
	return c.run(ctx, append(args, props(cfg.Props)...))
}

// ShareConsumeConfig says what ShareConsume reads.
type ShareConsumeConfig struct {
	Bootstrap []string          // required
	Topics    []string          // required
	Group     string            // the share group (required)
	Max       int               // distinct records to read (required)
	Timeout   time.Duration     // to read them [60s]
	Props     map[string]string // more consumer properties
}

// ShareConsume reads the topics as a member of a share group with the Java
// client's KafkaShareConsumer (KIP-932), acknowledging every record ACCEPT,
// until it read Max distinct records; it returns every delivery, a record
// delivered again included, in the order they came.
func (c *Client) ShareConsume(ctx context.Context, cfg ShareConsumeConfig) ([]Record, error) {
	if len(cfg.Bootstrap) == 0 || len(cfg.Topics) == 0 || cfg.Group == "" || cfg.Max <= 0 {
		return nil, fmt.Errorf("javaclient share-consume: bootstrap servers, topics, a group and a record count are required")
	}
	args := []string{"share-consume", "--bootstrap=" + strings.Join(cfg.Bootstrap, ","), "--topics=" + strings.Join(cfg.Topics, ","),
		"--group=" + cfg.Group, fmt.Sprintf("--max=%d", cfg.Max)}
	if cfg.Timeout > 0 {
		args = append(args, fmt.Sprintf("--timeout-ms=%d", cfg.Timeout.Milliseconds()))
	}
	return c.run(ctx, append(args, props(cfg.Props)...))
}

func props(p map[string]string) []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, "--property="+k+"="+p[k])
	}
	return out
}

// run runs the Java program and decodes its JSON lines.
func (c *Client) run(ctx context.Context, args []string) ([]Record, error) {
	jargs := append([]string{"-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", c.classpath(), "mirrord.javaclient.Main"}, args...)
	cmd := exec.CommandContext(ctx, c.java, jargs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// Pdeathsig fires when the forking thread exits: keep this goroutine on
	// its thread until the JVM is gone (golang/go#27505).
	runtime.LockOSThread()
	err := cmd.Run()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("javaclient %s: %w: %s", args[0], err, tail(stderr.String()))
	}
	var out []Record
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("javaclient %s: bad output line %q: %w", args[0], line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// tail is the first line of a Java error and its last few lines, for an
// error message.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) <= 3 {
		return strings.Join(lines, " | ")
	}
	return lines[0] + " | ... | " + strings.Join(lines[len(lines)-2:], " | ")
}

// ForTest builds the client for t: it skips t when the real tier is off
// (MIRRORD_TEST_KAFKA unset) or, outside CI, when java or mvn is missing.
func ForTest(t testing.TB) *Client {
	t.Helper()
	realkafka.TestVersions(t)
	c, err := Build(context.Background())
	if err != nil {
		realkafka.SkipMissingTool(t, err)
		t.Fatal(err)
	}
	return c
}
