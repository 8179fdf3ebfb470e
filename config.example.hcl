# mirrord configuration: an example that documents every key.
#
# This file mirrors the order topics of an on-premises cluster ("dc1",
# SCRAM-SHA-512 over TLS) into a cloud cluster ("cloud", TLS with a client
# certificate). Check a file with:   mirrord validate --config FILE
#
# Syntax: HCL (https://github.com/hashicorp/hcl). Values are literals: no
# variables or functions. Unknown keys and blocks are errors.
#
# Environment overrides: a variable MIRRORD_<BLOCK>__[<name>__]<KEY> sets one
# key, levels separated by a double underscore. Block and key names are
# case-insensitive, cluster and link names are written as in this file.
# Values are written without quotes; lists are comma-separated or written
# as an HCL list (["a{1,2}", "b"]) when an element contains a comma.
#
#   MIRRORD_AGENT__LOG_LEVEL=debug
#   MIRRORD_CLUSTER__dc1__BOOTSTRAP_SERVERS=kafka1:9093,kafka2:9093
#   MIRRORD_CLUSTER__dc1__SASL__PASSWORD=...
#   MIRRORD_LINK__dc1_to_cloud__CHECKPOINT_INTERVAL=10s
#
# Overrides change blocks of this file; they cannot add a cluster or a link.
# Variables that do not start with MIRRORD_AGENT, MIRRORD_CLUSTER or
# MIRRORD_LINK are not overrides and are ignored.
#
# Names of clusters and links: letters, digits, '-' and single '_', starting
# with a letter or digit.

# The agent block is optional.
agent {
  # Name of this agent, shown in logs and recorded with each link's session.
  # Default: "mirrord".
  name = "mirrord-dc1-1"

  # host:port of the HTTP listener: /metrics, /healthz, /readyz, the status
  # page at / and the admin API under /v1/. ":9644" or "0.0.0.0:9644" listens
  # on every interface; mirrord run then refuses to start unless the admin
  # block below sets a token (or requires client certificates), or sets
  # insecure_no_auth = true.
  # Default: "127.0.0.1:9644".
  listen = "127.0.0.1:9644"

  # Log level: "trace", "debug", "info", "warn" or "error".
  # Default: "info".
  log_level = "info"

  # Log format: "text" or "json".
  # Default: "text".
  log_format = "json"

  # How long a graceful stop (SIGINT or SIGTERM) may take: in-flight appends
  # drain and every link commits a final checkpoint within it. A second
  # signal stops at once; the next start reconciles what was in flight.
  # Default: "15s".
  shutdown_timeout = "15s"

  # The Go runtime's soft memory limit that `mirrord run` sets: the garbage
  # collector works harder as the process nears it, so that resident memory
  # stays near the links' buffers instead of growing to twice the live heap.
  # A GOMEMLIMIT variable in the environment wins (GOMEMLIMIT=off: no limit).
  # Raise it when the host has memory to spare and CPU is short. At least
  # "32MiB".
  # Default: the sum of the links' max_buffered_bytes plus "48MiB", where a
  # link with coalesce_bytes above 0 counts twice its max_buffered_bytes (each joined batch in flight is a copy of
  # buffered batches).
  # memory_limit = "256MiB"

  # Who may use the HTTP listener, and TLS for it. The admin API under /v1/
  # can pause and resume links (and fail them over): without a token it is
  # open to whoever reaches agent.listen, so keep the listener on loopback
  # then. /healthz, /readyz, /metrics and the status page stay open unless
  # protect_metrics says otherwise.
  #
  # The secure setup for a listener that other hosts reach (a pod, a VM):
  #
  #   listen = "0.0.0.0:9644"
  #   admin {
  #     token_file = "/etc/mirrord/admin/token"   # a mounted secret
  #     cert_file  = "/etc/mirrord/tls/admin.pem"
  #     key_file   = "/etc/mirrord/tls/admin-key.pem"
  #   }
  #
  # and the commands that call the API (mirrord links, pause, resume) with
  # the same file read the same token.
  admin {
    # The admin token: every request under /v1/ (and /metrics with
    # protect_metrics) must carry "Authorization: Bearer <token>"; a missing
    # token is answered 401, a wrong one 403. Either token_env, the name of an
    # environment variable that holds it (read at start), or token_file, a
    # file that holds it (read at start, and again when it changes, so that a
    # rotated Kubernetes secret takes effect without a restart); not both. At
    # least 16 characters, e.g. the output of: openssl rand -hex 32.
    # The token itself is never written in this file:
    #   token = "..."   is an error.
    # Default: unset (no token).
    # token_env  = "MIRRORD_ADMIN_TOKEN"
    # token_file = "/etc/mirrord/admin/token"

    # /metrics needs the token too. Needs token_env or token_file.
    # Default: false.
    # protect_metrics = true

    # TLS for the listener: its certificate chain and private key (PEM), both
    # or neither, read at start and again when they change.
    # Default: unset (plain HTTP).
    # cert_file = "/etc/mirrord/tls/admin.pem"
    # key_file  = "/etc/mirrord/tls/admin-key.pem"

    # Mutual TLS: every request, /healthz included, must present a client
    # certificate signed by a CA in this PEM file. Needs cert_file. Counts as
    # authentication for a listener on another address than loopback.
    # Default: unset (no client certificates).
    # client_ca_file = "/etc/mirrord/tls/admin-clients-ca.pem"

    # Lets mirrord run listen on an address other hosts reach without a token
    # or client certificates; it logs a warning at start. Anyone who reaches
    # the port can then pause and resume links.
    # Default: false.
    # insecure_no_auth = false
  }
}

# A cluster block says how to reach one Kafka cluster; its name is what
# links refer to. Define as many as the links need.
cluster "dc1" {
  # Brokers to bootstrap from, as host:port. Required, at least one.
  bootstrap_servers = ["kafka1.dc1.example.com:9093", "kafka2.dc1.example.com:9093", "kafka3.dc1.example.com:9093"]

  # Client ID sent to the brokers (quotas, request logs).
  # Default: "mirrord".
  client_id = "mirrord-dc1"

  # Pins the cluster ID that the PID transform derives the region from,
  # instead of the ID the cluster reports. Only for clusters whose reported ID
  # is not a stable UUID. Default: unset (ask the cluster).
  # cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"

  # TLS to the brokers. Without a tls block the connection is plaintext.
  tls {
    # Default: true when the tls block is present, false without one;
    # enabled = false turns TLS off and keeps the other settings.
    enabled = true

    # PEM file with the CA certificates that sign the brokers' certificates.
    # Default: unset (the system's roots).
    ca_file = "/etc/mirrord/tls/dc1-ca.pem"

    # Client certificate and its private key (PEM), for brokers that require
    # TLS client authentication. Both or neither. Default: unset.
    # cert_file = "/etc/mirrord/tls/client.pem"
    # key_file  = "/etc/mirrord/tls/client-key.pem"

    # Host name checked against the brokers' certificates.
    # Default: unset (the host of each broker's address).
    # server_name = "kafka.dc1.example.com"

    # Skips verification of the brokers' certificates. Never in production.
    # Default: false.
    insecure_skip_verify = false
  }

  # SASL authentication. Without a sasl block mirrord does not authenticate.
  sasl {
    # "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512". Required in a sasl block.
    # PLAIN sends the password as is: use it only over TLS.
    mechanism = "SCRAM-SHA-512"

    # Required with a mechanism.
    username = "mirrord"

    # The password: exactly one of password (in this file), password_env (the
    # name of an environment variable that holds it, read at start) or
    # password_file (a file that holds it, e.g. a mounted Kubernetes secret;
    # read at start, and again for new connections when it changes).
    # Surrounding whitespace in the file is ignored.
    # The password never appears in logs, errors or the admin API.
    # password      = "..."
    # password_file = "/etc/mirrord/secrets/dc1-kafka-password"
    password_env = "DC1_KAFKA_PASSWORD"
  }
}

cluster "cloud" {
  bootstrap_servers = ["b-1.cloud.example.com:9094", "b-2.cloud.example.com:9094"]
  client_id         = "mirrord-dc1"

  tls {
    ca_file   = "/etc/mirrord/tls/cloud-ca.pem"
    cert_file = "/etc/mirrord/tls/client.pem"
    key_file  = "/etc/mirrord/tls/client-key.pem"
  }

  # SASL OAUTHBEARER (OAuth 2.0 tokens), for clusters that use OAuth rather
  # than passwords. mechanism = "OAUTHBEARER" takes no username or password,
  # and a token from exactly one of:
  #
  # token_file: a file that holds a token that something else keeps fresh (a
  # sidecar, a projected service account token); read for each new
  # connection when it changed.
  #
  # token_endpoint: mirrord gets tokens itself with the OAuth client-
  # credentials grant: it POSTs grant_type=client_credentials (and scope) to
  # the endpoint as client_id with the client secret (HTTP Basic), and keeps
  # each token until shortly before its expires_in. https, or http on a
  # loopback address only. The client secret comes from client_secret_file
  # (read again when it changes) or client_secret_env, never from this file:
  #   client_secret = "..."   is an error.
  # scope is optional (Default: unset).
  #
  # extensions: SASL extensions sent with the token (RFC 7628), names made of
  # letters only. Default: none.
  #
  # sasl {
  #   mechanism          = "OAUTHBEARER"
  #   token_endpoint     = "https://idp.example.com/oauth2/token"
  #   client_id          = "mirrord-dc1"
  #   client_secret_file = "/etc/mirrord/secrets/cloud-oauth-client-secret"
  #   scope              = "kafka"
  #   extensions         = { logicalCluster = "lkc-abc123", identityPoolId = "pool-xyz" }
  # }
  #
  # Instead of client_secret_file:
  # client_secret_env = "CLOUD_OAUTH_CLIENT_SECRET"
  # Instead of token_endpoint, client_id and the client secret:
  # token_file = "/var/run/secrets/kafka/token"
}

# A link mirrors the selected topics of its source cluster into its
# destination cluster. Each link keeps its state (checkpoints, producer-ID
# salts, barriers, its session lease) in a compacted state topic on the
# destination and runs one session at a time (transactional.id
# "mirrord.<link name>"), so a second agent with the same link is fenced.
link "dc1_to_cloud" {
  # Names of cluster blocks. Both required, and different.
  source      = "dc1"
  destination = "cloud"

  # Which source topics to mirror. Patterns are Go RE2 regular expressions
  # matched against the WHOLE topic name: "orders" selects the topic
  # "orders" only, "orders\\..*" every topic starting with "orders.".
  # In HCL strings a backslash is written twice: "\\." is the regexp \.
  # include: required, at least one pattern (write [".*"] for every topic).
  # exclude: default []; an exclude match always wins.
  # Topics whose names start with "__" and the link's state topic are never
  # mirrored.
  topics {
    include = ["orders\\..*", "payments"]
    exclude = [".*\\.tmp", ".*-scratch"]
  }

  # Destination topic name. {topic} is the source topic's name (required),
  # {source} the source cluster's name (optional). Nothing else in braces.
  # Default: "{topic}".
  rename = "{source}.{topic}"

  # Where a partition without a checkpoint starts: "earliest" or "latest".
  # Default: "earliest".
  start_from = "earliest"

  # The link's state topic, created on the destination, compacted. Keep the
  # "__" prefix so that no other link mirrors it. A link with a
  # transactional link in the other direction reads the topic of this name
  # at its source too (active-active; README): give both the same name.
  # Default: "__mirror_state".
  state_topic = "__mirror_state"

  # Partitions of the state topic when mirrord creates it.
  # Default: 1.
  state_topic_partitions = 1

  # Replication factor of the state topic when mirrord creates it; -1 uses
  # the broker's default.replication.factor. Default: -1.
  state_topic_replication_factor = 3

  # How often checkpoints are committed. At most a third of session_timeout.
  # In transactional delivery it is also how often the transaction commits,
  # so it sets when read_committed consumers see mirrored records (p99
  # about this interval; "500ms" gave p99 0.5 s in bench/README.md).
  # Durations are Go durations: "500ms", "5s", "2m", "1h30m".
  # Default: "5s".
  checkpoint_interval = "5s"

  # The link session's lease: a session that has not committed a checkpoint
  # for this long stops appending, and a new session (after a crash or on
  # another agent) waits until the previous one's lease has expired before
  # it takes over. Default: "30s".
  session_timeout = "30s"

  # Bytes fetched but not yet acknowledged by the destination, for the whole
  # link; fetching pauses above it. A number of bytes or a string with a unit
  # (KiB, MiB, GiB; KB, MB, GB are powers of 1000). At least "1MiB".
  # Default: "64MiB".
  max_buffered_bytes = "128MiB"

  # When a partition has a backlog of small batches (several fetched and
  # waiting, each under 64 KiB), a run of its consecutive batches (same
  # codec, no gap between their offsets) is appended as one destination
  # batch of at most this many bytes, which costs the destination broker
  # one batch's validation instead of one per source batch. Larger batches
  # are appended as they are. In preserve delivery a run is one
  # producer's batches with consecutive sequences (same producer ID and
  # epoch), joined into the batch that producer would have sent with a
  # longer linger: its mapped producer ID, epoch and first base sequence;
  # batches without a producer ID are never joined. Uncompressed records
  # are re-framed without decompression; compressed ones are decompressed
  # and compressed again with their codec. A batch that comes alone is
  # appended as it is, and so are always the batches of a topic that is
  # compacted at the source or at the destination.
  # Keep it below the destination topics' max.message.bytes (1048588 by
  # default). "0" appends every batch alone. Default: "1000000".
  coalesce_bytes = "1000000"

  # When the source no longer holds a partition's next offset (retention
  # deleted it): "fail" stops the link with an error, "earliest" continues
  # from the earliest offset the source still holds (the gap is logged and
  # counted). Default: "fail".
  on_offset_out_of_range = "fail"

  # Producer state (per destination partition and producer ID) idle for
  # longer than this is forgotten, and its PID salt records are deleted.
  # Default: "24h".
  producer_state_expiry = "24h"

  # The timeout of every Produce the link sends: how long a destination
  # broker may wait for the in-sync replicas before it answers (the
  # request's timeout, at most three quarters of the session's lease left).
  # It is also how long a Produce can stay inside a broker, so a session
  # that takes over waits this long past the previous session's lease, and
  # an append that got no answer is settled only this long after it was
  # sent. Keep it at or above the brokers' replica.lag.time.max.ms (30s by
  # default). Default: "30s".
  produce_timeout = "30s"

  # How the link appends to the destination (see the README's "Delivery
  # modes"). "preserve" (the default) forwards every batch with its source
  # producer's identity (mapped producer ID, epoch, sequence); the agent
  # keeps the producer state, a new session waits out the previous one's
  # lease, and offset translation, group sync and failover are exact.
  # "transactional" appends as the session's own transactional producer:
  # the data appended since the last checkpoint and the checkpoint commit in
  # one destination transaction, the broker fences a dead session's appends,
  # and a new session resumes at once at its last checkpoint. read_committed
  # consumers see the data at each commit; offset translation, group sync
  # and failover are exact for read_committed consumers (translations
  # follow the last commit). Chain deduplication needs "preserve". A link
  # in the other direction tells a transactional link's batches by the
  # producer IDs its sessions record in the state topic (MirrorTxnProducer):
  # links in both directions over the same topics use the same state_topic.
  # Default: "preserve".
  delivery = "preserve"

  # With delivery = "transactional": the coordinator aborts a transaction
  # open longer than this (and the session starts again at its last
  # checkpoint). At least three checkpoint intervals; brokers cap it at
  # transaction.max.timeout.ms (15m by default). Default: "1m".
  transaction_timeout = "1m"

  # Origin (README, "Active-active and failback"). A batch whose producer ID
  # says it was first produced at the destination cluster (the reverse
  # link, or a mirror further up a chain, brought it here) is not sent
  # back: that is what lets links run in both directions over the same
  # topic names. Counted as mirrord_batches_returned_home_total.
  #
  # What the link does with batches that carry no producer ID (producers
  # with enable.idempotence off, the Kafka client default before 3.0),
  # which do not say where they were first produced: "forward" appends
  # them like any other, "skip" leaves them out (counted as
  # mirrord_batches_unattributed_skipped_total). Links in both directions
  # over the same topic names must set it: "skip" for active-active
  # (otherwise such a batch would go back and forth for ever), "forward"
  # if the two links mirror different topics. Default: "forward".
  unattributed = "forward"

  # Send batches that started at the destination back to it after all:
  # only for a destination rebuilt under its old cluster ID that should get
  # its own records back from this mirror. Default: false.
  return_home = false

  # The destination topics have producers of their own (active-active, or
  # writes after a failover while the link still runs): destination batches
  # the link did not write are expected, counted as
  # mirrord_destination_local_offsets_total and
  # mirrord_destination_local_batches_total, and not logged as errors. Off,
  # they count as destination_gap_offsets and foreign_batches, which alarm.
  # Default: false.
  shared_destination = false

  # An append whose outcome is unknown is settled against the destination
  # before anything else is sent for its partition. One a broker answered
  # with an error (NOT_LEADER_OR_FOLLOWER after a leader move,
  # REQUEST_TIMED_OUT) is settled at once against the partition's current
  # leader. One that got no answer (a lost connection) is settled
  # produce_timeout after it was sent plus this margin, for a request that
  # waited in a broker's queue. Default: "5s".
  settle_delay = "5s"

  # How often the source is listed for new topics that match and for
  # partitions added to mirrored topics. Default: "30s".
  discovery_interval = "30s"

  # Replication factor of the destination topics the link creates (with the
  # source's partition count, cleanup.policy, retention and
  # max.message.bytes); -1 uses the broker's default.replication.factor.
  # Existing destination topics are used as they are. Default: -1.
  destination_replication_factor = 3

  # Checks the CRC of every fetched batch before it is forwarded. The
  # destination broker checks it anyway, and a damaged batch is refetched;
  # this catches it one step earlier at the cost of a checksum per batch.
  # Default: false.
  check_crcs = false

  # Group offset sync (README "Failover and migration"): the source consumer
  # groups whose committed offsets the link translates, exactly, to the
  # destination and commits to the same group there (with the committed
  # metadata, topics renamed as the link renames them), for the partitions it
  # mirrors. A group is left alone while it has active members at the
  # destination, and a destination group is never moved back. Patterns are
  # Go RE2, matched against whole group IDs; an exclude match always wins.
  # Default: no groups block, no sync.
  groups {
    include = ["billing-.*", "audit"]
    exclude = [".*-test"]
  }

  # Share-group sync (KIP-932; README "Share groups"): the source share
  # groups whose share-partition start offsets the link translates, exactly,
  # and sets at the share group of the same ID at the destination
  # (AlterShareGroupOffsets), for the partitions it mirrors. A share group
  # is left alone while it has members at the destination, and its start
  # offsets are never moved back. Records above a start offset that the
  # group already acknowledged at the source are delivered again after a
  # move: brokers expose only the start offset. Needs Kafka 4.1 or later
  # with share groups enabled at both ends (production-ready since 4.2).
  # Patterns as in groups. Default: no share_groups block, no sync.
  share_groups {
    include = ["orders-workers"]
  }

  # How often the selected groups and share groups are synced.
  # Default: "10s".
  group_sync_interval = "10s"

  # Topic config sync (README "Topic settings"): the settings of each source
  # topic follow to its mirror, also when they change later, and an
  # override deleted at the source is deleted at the destination (whose
  # broker default then applies, as the source's does). cleanup.policy,
  # retention.ms, retention.bytes and max.message.bytes follow the source's
  # value wherever it comes from; other settings follow only when the
  # source sets them on the topic. Mirrors always keep
  # compression.type=producer and message.timestamp.type=CreateTime
  # (batches are forwarded unchanged). Settings tied to the source cluster
  # are left out by default: min.insync.replicas,
  # unclean.leader.election.enable, the replication throttles, confluent.*
  # (placement, Confluent tiered storage), tiered storage (remote.*,
  # local.retention.*), errors.deadletterqueue.group.enable (the source's
  # share groups), the arrival-time bounds
  # message.timestamp.before/after.max.ms, and the settings Kafka 4.0
  # removed. Runs only in the agent whose session holds
  # the link; a refused or invalid change is that topic's error, reported
  # in the link status's config_sync section; mirroring goes on.
  config_sync {
    # Off: settings are copied only when the link creates a topic.
    # Default: true.
    enabled = true
    # Also manage destination topics the link did not create (the link
    # records those it creates in its state topic). Their overrides are
    # then replaced by the source's. Default: false: left alone.
    all_topics = false
    # Settings excluded by default that should follow after all, by exact
    # name (for clusters built alike). Default: none.
    include = ["min.insync.replicas"]
    # More settings that never follow: Go RE2 patterns matched against
    # whole setting names; an exclude match wins over include. Default:
    # none.
    exclude = ["segment\\..*"]
  }

  # How often topic settings are synced; a sync also runs right after the
  # link creates or starts mirroring topics. Default: "1m".
  config_sync_interval = "1m"

  # ACL sync (README "ACLs"; off by default): the source's ACL bindings on
  # the mirrored topics, and on the consumer groups and share groups the
  # groups and share_groups blocks select, are created at the destination
  # on the topic's mirror (with the rename) and the group of the same
  # name, so that consumers can read there before and after a failover.
  # A prefixed or wildcard binding becomes one literal binding per
  # mirrored topic or synced group it covers; DENY bindings follow (but
  # not one that would apply to the link's own principal: it would refuse
  # the link its writes); ALLOW
  # WRITE on topics waits until WRITE is granted (ALLOW ALL follows as
  # every other topic operation until then). The link records each
  # binding it creates in its state topic and deletes only those, when the
  # source no longer calls for them; a binding the destination held
  # already is left alone. Needs DESCRIBE on the source cluster, DESCRIBE
  # and ALTER on the destination cluster (docs/acls.md). Runs only in the
  # agent whose session holds the link; errors are reported in the link
  # status's acl_sync section; mirroring goes on.
  acl_sync {
    # Default: false.
    enabled = true
    # ALLOW WRITE on the mirrored topics follows at once. Default: false:
    # it follows after `mirrord failover --grant-write`, and from then on.
    write = false
  }

  # How often ACLs are synced; a sync also runs right after the link
  # starts mirroring or adds topics. Default: "1m".
  acl_sync_interval = "1m"

  # Slots (README "Several agents"): how many parts the link's source
  # partitions are spread over, so that the agents running this
  # configuration share the work. Each slot is a session of its own
  # (transactional.id mirrord.<link>.<slot>, its own lease and
  # checkpoints), owned by one agent at a time: the agents form the
  # Kafka consumer group mirrord-slots-<link> on the destination cluster
  # over the topic __mirror_slots_<link> (one partition per slot, created
  # at the first start, never written), and the group's assignment says
  # who owns which slot. A partition's slot depends on its topic's name,
  # its number and slots only, so it stays put as topics grow; changing
  # slots moves partitions: stop every agent first. Slot 0's owner
  # creates and grows the destination topics and runs the config and ACL
  # syncs and the group offset sync (groups, share_groups) over every
  # slot's partitions, translating the other slots' from their
  # checkpoints in the state topic. An agent that crashed loses its slots after session_timeout
  # (the group's session timeout: at least the brokers'
  # group.min.session.timeout.ms, 6 s by default); a clean stop hands them
  # on at once. Choose a few slots per agent that may ever run the link
  # (6 for 3 agents); more slots than partitions leaves slots idle.
  # The per-link commands (pause, resume, failover, translation) are
  # refused on a link with slots. Default: 1 (one session for the whole
  # link; the agents stand by for each other).
  slots = 1
}
