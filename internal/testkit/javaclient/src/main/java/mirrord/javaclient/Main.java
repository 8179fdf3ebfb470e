package mirrord.javaclient;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * An independent Kafka client for mirrord's real test tier: the reference
 * Java client produces and consumes, and prints what it did as JSON lines on
 * stdout for the Go side to check.
 *
 * <pre>
 * produce --bootstrap=H:P --topics=a,b [--records=N] [--compression=none,gzip,...]
 *         [--transactions=N] [--txn-records=N] [--abort-every=K] [--transactional-id=ID]
 *         [--property=k=v ...]
 * consume --bootstrap=H:P --topics=a,b [--timeout-ms=N] [--property=k=v ...]
 *         [--group=G [--max=N]]
 * </pre>
 *
 * produce runs one idempotent producer per compression type (acks=all),
 * each writing N records round-robin over the topics' partitions, then one
 * transactional producer whose transactions each span several partitions and
 * topics; every K-th transaction is aborted. Each record sent is printed with
 * "status" committed or aborted. consume reads the topics read_committed
 * with CRC checks from the beginning to the end offsets they had when it
 * started, and prints every record. With --group it is a member of consumer
 * group G instead (subscribe, auto commit off): it starts at the group's
 * committed offsets (the earliest where none), reads to the end offsets the
 * topics had when it got its assignment, or, with --max, until it read N
 * records and at least one of every partition not at its end, then commits
 * the offset after the last record it printed of each partition (commitSync)
 * and leaves the group. Exit status 0 on success, 1 on failure
 * (with the reason on stderr), 2 on bad usage.
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) {
        if (args.length < 1) {
            usage("no command");
        }
        Map<String, String> opts = new HashMap<>();
        Properties extra = new Properties();
        for (int i = 1; i < args.length; i++) {
            String a = args[i];
            int eq = a.indexOf('=');
            if (!a.startsWith("--") || eq < 0) {
                usage("bad argument " + a + " (want --name=value)");
            }
            String k = a.substring(2, eq);
            String v = a.substring(eq + 1);
            if (k.equals("property")) {
                int e = v.indexOf('=');
                if (e < 0) {
                    usage("bad --property " + v + " (want --property=key=value)");
                }
                extra.setProperty(v.substring(0, e), v.substring(e + 1));
            } else {
                opts.put(k, v);
            }
        }
        try {
            switch (args[0]) {
                case "produce" -> produce(opts, extra);
                case "share-consume" -> shareConsume(opts, extra);
                case "consume" -> {
                    if (opts.containsKey("group")) {
                        consumeGroup(opts, extra);
                    } else {
                        consume(opts, extra);
                    }
                }
                default -> usage("unknown command " + args[0]);
            }
        } catch (Exception e) {
            System.out.flush();
            System.err.println("javaclient " + args[0] + ": " + e);
            e.printStackTrace(System.err);
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);
    }

    private static void usage(String why) {
        System.err.println("javaclient: " + why + "\nusage: javaclient produce|consume|share-consume --bootstrap=H:P --topics=a,b [options]");
        System.exit(2);
    }

    private static String need(Map<String, String> opts, String k) {
        String v = opts.get(k);
        if (v == null || v.isEmpty()) {
            usage("--" + k + " is required");
        }
        return v;
    }

    private static int intOpt(Map<String, String> opts, String k, int def) {
        String v = opts.get(k);
        return v == null ? def : Integer.parseInt(v);
    }

    // ---- produce ----

    private static final class Sent {
        final String producer;
        final ProducerRecord<byte[], byte[]> rec;
        final Future<RecordMetadata> md;

        Sent(String producer, ProducerRecord<byte[], byte[]> rec, Future<RecordMetadata> md) {
            this.producer = producer;
            this.rec = rec;
            this.md = md;
        }
    }

    private static Properties producerProps(String bootstrap, Properties extra) {
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.setProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.setProperty(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(extra);
        return p;
    }

    /** partitions returns the partition count of each topic, as the producer sees it. */
    private static int[] partitions(KafkaProducer<byte[], byte[]> p, String[] topics) {
        int[] n = new int[topics.length];
        for (int i = 0; i < topics.length; i++) {
            n[i] = p.partitionsFor(topics[i]).size();
        }
        return n;
    }

    /** record builds record i of producer name: some keys are null, values hold a binary byte. */
    private static ProducerRecord<byte[], byte[]> record(String name, int i, String topic, int partition) {
        byte[] key = i % 7 == 3 ? null : (name + "-" + i).getBytes(StandardCharsets.UTF_8);
        byte[] text = (name + " record " + i + " ").getBytes(StandardCharsets.UTF_8);
        byte[] value = new byte[text.length + 2];
        System.arraycopy(text, 0, value, 0, text.length);
        value[text.length] = 0;
        value[text.length + 1] = (byte) i;
        List<Header> hs = new ArrayList<>();
        hs.add(new RecordHeader("producer", name.getBytes(StandardCharsets.UTF_8)));
        hs.add(new RecordHeader("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
        if (i % 5 == 0) {
            hs.add(new RecordHeader("null-header", null));
        }
        return new ProducerRecord<>(topic, partition, null, key, value, hs);
    }

    private static void produce(Map<String, String> opts, Properties extra) throws Exception {
        String bootstrap = need(opts, "bootstrap");
        String[] topics = need(opts, "topics").split(",");
        int records = intOpt(opts, "records", 100);
        String[] codecs = opts.getOrDefault("compression", "none,gzip,snappy,lz4,zstd").split(",");
        int txns = intOpt(opts, "transactions", 10);
        int txnRecords = intOpt(opts, "txn-records", 6);
        int abortEvery = intOpt(opts, "abort-every", 3);
        String txnID = opts.getOrDefault("transactional-id", "mirrord-javaclient-" + UUID.randomUUID());

        for (String codec : codecs) {
            if (records == 0 || codec.isEmpty()) {
                continue;
            }
            String name = "idempotent-" + codec;
            Properties p = producerProps(bootstrap, extra);
            p.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
                int[] parts = partitions(prod, topics);
                List<Sent> sent = new ArrayList<>();
                for (int i = 0; i < records; i++) {
                    int t = i % topics.length;
                    ProducerRecord<byte[], byte[]> r = record(name, i, topics[t], (i / topics.length) % parts[t]);
                    sent.add(new Sent(name, r, prod.send(r)));
                }
                prod.flush();
                for (Sent s : sent) {
                    print("committed", s.producer, s.md.get(), s.rec);
                }
            }
        }

        if (txns == 0) {
            return;
        }
        Properties p = producerProps(bootstrap, extra);
        p.setProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnID);
        p.setProperty(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
            prod.initTransactions();
            int[] parts = partitions(prod, topics);
            int i = 0;
            for (int n = 0; n < txns; n++) {
                boolean abort = abortEvery > 0 && n % abortEvery == abortEvery - 1;
                String name = "transactional";
                prod.beginTransaction();
                List<Sent> sent = new ArrayList<>();
                for (int j = 0; j < txnRecords; j++, i++) {
                    int t = (n + j) % topics.length;
                    ProducerRecord<byte[], byte[]> r = record(name, i, topics[t], (n + j) % parts[t]);
                    sent.add(new Sent(name, r, prod.send(r)));
                }
                prod.flush();
                List<RecordMetadata> mds = new ArrayList<>();
                for (Sent s : sent) {
                    mds.add(s.md.get());
                }
                if (abort) {
                    prod.abortTransaction();
                } else {
                    prod.commitTransaction();
                }
                for (int j = 0; j < sent.size(); j++) {
                    print(abort ? "aborted" : "committed", name, mds.get(j), sent.get(j).rec);
                }
            }
        }
    }

    private static void print(String status, String producer, RecordMetadata md, ProducerRecord<byte[], byte[]> r) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"status\":").append(str(status));
        b.append(",\"producer\":").append(str(producer));
        b.append(",\"topic\":").append(str(md.topic()));
        b.append(",\"partition\":").append(md.partition());
        b.append(",\"offset\":").append(md.offset());
        b.append(",\"timestamp\":").append(md.timestamp());
        b.append(",\"key\":").append(b64(r.key()));
        b.append(",\"value\":").append(b64(r.value()));
        b.append(",\"headers\":").append(headers(r.headers()));
        b.append('}');
        System.out.println(b);
    }

    // ---- consume ----

    private static void consume(Map<String, String> opts, Properties extra) throws Exception {
        String bootstrap = need(opts, "bootstrap");
        String[] topics = need(opts, "topics").split(",");
        long timeoutMs = intOpt(opts, "timeout-ms", 60000);
        Properties p = consumerProps(bootstrap, extra);
        long deadline = System.currentTimeMillis() + timeoutMs;
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (String t : topics) {
                List<PartitionInfo> ps = c.partitionsFor(t, Duration.ofMillis(timeoutMs));
                if (ps == null || ps.isEmpty()) {
                    throw new IllegalStateException("topic " + t + " has no partitions");
                }
                for (PartitionInfo pi : ps) {
                    tps.add(new TopicPartition(t, pi.partition()));
                }
            }
            c.assign(tps);
            // read_committed: the end offset is the last stable offset.
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofMillis(timeoutMs));
            c.seekToBeginning(tps);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp, Duration.ofMillis(timeoutMs)) < end.get(tp)) {
                        done = false;
                        break;
                    }
                }
                if (done) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("did not reach the end offsets " + end + " within " + timeoutMs + " ms");
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() >= end.get(new TopicPartition(r.topic(), r.partition()))) {
                        continue; // written after we started
                    }
                    printRecord(r);
                    count++;
                }
            }
        }
        System.err.println("javaclient consume: " + count + " records");
    }

    // read_committed with CRC checks, auto commit off, from the earliest
    // offset where nothing is committed; extra properties last.
    private static Properties consumerProps(String bootstrap, Properties extra) {
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.setProperty(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.putAll(extra);
        return p;
    }

    // printRecord prints a consumed record as one JSON line.
    private static void printRecord(ConsumerRecord<byte[], byte[]> r) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"topic\":").append(str(r.topic()));
        b.append(",\"partition\":").append(r.partition());
        b.append(",\"offset\":").append(r.offset());
        b.append(",\"timestamp\":").append(r.timestamp());
        b.append(",\"timestamp_type\":").append(str(r.timestampType().toString()));
        b.append(",\"key\":").append(b64(r.key()));
        b.append(",\"value\":").append(b64(r.value()));
        b.append(",\"headers\":").append(headers(r.headers()));
        b.append('}');
        System.out.println(b);
    }

    private static void consumeGroup(Map<String, String> opts, Properties extra) throws Exception {
        String bootstrap = need(opts, "bootstrap");
        List<String> topics = List.of(need(opts, "topics").split(","));
        String group = need(opts, "group");
        int max = intOpt(opts, "max", 0);
        long timeoutMs = intOpt(opts, "timeout-ms", 60000);
        Properties p = consumerProps(bootstrap, extra);
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, group);
        long deadline = System.currentTimeMillis() + timeoutMs;
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(topics);
            Map<TopicPartition, Long> end = null;
            Map<TopicPartition, Long> next = new HashMap<>(); // after the last record printed
            while (true) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("group " + group + ": read " + count + " records and did not finish within " + timeoutMs + " ms (end offsets " + end + ")");
                }
                var recs = c.poll(Duration.ofMillis(200));
                if (end == null) {
                    if (c.assignment().isEmpty()) {
                        continue; // not joined yet
                    }
                    // read_committed: the end offset is the last stable offset.
                    end = c.endOffsets(c.assignment(), Duration.ofMillis(timeoutMs));
                }
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= end.getOrDefault(tp, Long.MAX_VALUE)) {
                        continue; // written after the assignment
                    }
                    printRecord(r);
                    next.put(tp, r.offset() + 1);
                    count++;
                }
                boolean done = true;
                for (TopicPartition tp : c.assignment()) {
                    boolean atEnd = c.position(tp, Duration.ofMillis(timeoutMs)) >= end.getOrDefault(tp, 0L);
                    if (max > 0 ? !atEnd && !next.containsKey(tp) : !atEnd) {
                        done = false;
                        break;
                    }
                }
                if (done && (max == 0 || count >= max)) {
                    break;
                }
            }
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            next.forEach((tp, o) -> commit.put(tp, new OffsetAndMetadata(o)));
            c.commitSync(commit, Duration.ofMillis(timeoutMs));
        }
        System.err.println("javaclient consume: group " + group + ": " + count + " records");
    }

    // ---- share-consume ----

    // shareConsume reads the topics as a member of share group --group with
    // the Java client's KafkaShareConsumer (KIP-932), acknowledging every
    // record ACCEPT (explicit acknowledgement, committed after each poll),
    // until it has printed --max distinct records (topic, partition,
    // offset); a record delivered again is printed again.
    private static void shareConsume(Map<String, String> opts, Properties extra) throws Exception {
        String bootstrap = need(opts, "bootstrap");
        List<String> topics = List.of(need(opts, "topics").split(","));
        String group = need(opts, "group");
        int max = intOpt(opts, "max", 0);
        if (max <= 0) {
            usage("share-consume needs --max");
        }
        long timeoutMs = intOpt(opts, "timeout-ms", 60000);
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.setProperty(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.setProperty("share.acknowledgement.mode", "explicit");
        p.putAll(extra);
        long deadline = System.currentTimeMillis() + timeoutMs;
        Set<String> seen = new HashSet<>();
        int count = 0;
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(topics);
            while (seen.size() < max) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("share group " + group + ": read " + seen.size() + " of " + max + " records within " + timeoutMs + " ms");
                }
                var recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    printRecord(r);
                    seen.add(r.topic() + "/" + r.partition() + "/" + r.offset());
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    count++;
                }
                if (!recs.isEmpty()) {
                    c.commitSync(Duration.ofMillis(timeoutMs));
                }
            }
        }
        System.err.println("javaclient share-consume: group " + group + ": " + count + " deliveries of " + seen.size() + " records");
    }

    // ---- JSON ----

    private static String headers(Iterable<Header> hs) {
        StringBuilder b = new StringBuilder("[");
        for (Header h : hs) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append("{\"key\":").append(str(h.key())).append(",\"value\":").append(b64(h.value())).append('}');
        }
        return b.append(']').toString();
    }

    private static String b64(byte[] b) {
        return b == null ? "null" : "\"" + Base64.getEncoder().encodeToString(b) + "\"";
    }

    private static String str(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
