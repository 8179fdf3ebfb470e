package realkafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A broker's JVM spends most of its start loading, parsing and verifying
// the few thousand classes of Kafka and its dependencies. Class data
// sharing with a dynamic archive (JEP 350, Java 13 and later) maps them
// from a file made once per Kafka version and JDK build instead. On this
// project's 2-core machine a one-node start to ready took 5.7-6.3 s and
// 12-13 CPU seconds without it, and 3.6 s and 6.6 CPU seconds with it and
// Config.ShortLived; a test run starts brokers by the dozen.
//
// The archive lives in the cache as cds/<version>-<hash of the java path
// and its -version output>/broker.jsa. A JVM given an archive that does not
// match its build or class path only warns and loads the classes itself
// (-Xshare:auto, the default), so a stale archive costs time, never a
// start.
const archiveFile = "broker.jsa"

// classArchive returns the path of the class-data archive for brokers of
// version on java, making it on first use, or "" when there is none. It
// never fails a start: when making the archive fails, the reason is kept in
// the cache entry (failed.txt) and brokers start without one.
func classArchive(ctx context.Context, java string, jars *Jars, runDir, version string) string {
	sum := sha256.Sum256([]byte(java + "\n" + javaBuild(java)))
	key := version + "-" + hex.EncodeToString(sum[:6])
	dir, err := Cached(ctx, "cds", key, func(ctx context.Context, dir string) error {
		if err := makeArchive(ctx, java, jars, runDir, version, filepath.Join(dir, archiveFile)); err != nil {
			return os.WriteFile(filepath.Join(dir, "failed.txt"), []byte(err.Error()+"\n"), 0o644)
		}
		return nil
	})
	if err != nil {
		return ""
	}
	path := filepath.Join(dir, archiveFile)
	if !exists(path) {
		return ""
	}
	return path
}

// makeArchive starts one node that writes the archive of the classes it
// loaded when it exits, gives it the work a test gives a broker (a topic,
// produce in a committed and an aborted transaction, a group that consumes
// and commits),
// and shuts it down the controlled way: only a JVM that exits normally
// writes its archive.
func makeArchive(ctx context.Context, java string, jars *Jars, runDir, version, path string) error {
	cfg := Config{Version: version, ShortLived: true, JVMArgs: []string{"-XX:ArchiveClassesAtExit=" + path}}
	if err := cfg.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c, err := start(ctx, cfg, java, jars, runDir, "")
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		return err
	}
	if err := exercise(ctx, c.Addrs()); err != nil {
		return fmt.Errorf("class archive: exercise the broker: %w", err)
	}
	if err := c.Stop(ctx, 1); err != nil {
		return err
	}
	if !exists(path) {
		return fmt.Errorf("class archive: the JVM exited without writing %s (see %s)", path, c.LogFile(1))
	}
	return nil
}

// exercise creates a topic, produces to it in a committed and an aborted
// transaction, and consumes it in a group that commits.
func exercise(ctx context.Context, addrs []string) error {
	const topic = "class-archive"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID("class-archive"), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		return err
	}
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}, &kgo.Record{Value: []byte("y")}).FirstErr(); err != nil {
			return err
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			return err
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup("class-archive"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cons.Close()
	for got := 0; got < 2; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		got += fs.NumRecords()
	}
	return cons.CommitUncommittedOffsets(ctx)
}
