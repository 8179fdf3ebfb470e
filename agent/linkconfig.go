package agent

import (
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/statestore"
)

// LinkConfig is the configuration of link l of cfg as package link takes
// it (the agent's, and the offline commands' such as mirrord offsets).
func LinkConfig(cfg *config.Config, l *config.Link) link.Config {
	return link.Config{
		Link:        linkSettings(l),
		Agent:       cfg.Agent.Name,
		Source:      linkCluster(cfg.Clusters[l.Source]),
		Destination: linkCluster(cfg.Clusters[l.Destination]),
		// A link's stop drains for up to ShutdownTimeout and then
		// commits its final checkpoint within ShutdownTimeout: half
		// each keeps the whole stop within the agent's.
		ShutdownTimeout: cfg.Agent.ShutdownTimeout / 2,
	}
}

// linkSettings copies a validated link block into the link's own
// settings: package link takes its own config struct and never imports
// package config (internal/layout keeps that direction).
func linkSettings(l *config.Link) link.Settings {
	s := link.Settings{
		Name:                         l.Name,
		Include:                      l.Include,
		Exclude:                      l.Exclude,
		Rename:                       l.Rename,
		StartFrom:                    link.StartFrom(l.StartFrom),
		StateTopic:                   l.StateTopic,
		StateTopicPartitions:         l.StateTopicPartitions,
		StateTopicReplicationFactor:  l.StateTopicReplicationFactor,
		CheckpointInterval:           l.CheckpointInterval,
		SessionTimeout:               l.SessionTimeout,
		ProducerStateExpiry:          l.ProducerStateExpiry,
		MaxBufferedBytes:             l.MaxBufferedBytes,
		CoalesceBytes:                l.CoalesceBytes,
		OnOffsetOutOfRange:           fetcher.OutOfRange(l.OnOffsetOutOfRange),
		ProduceTimeout:               l.ProduceTimeout,
		Delivery:                     delivery(l.Delivery),
		TransactionTimeout:           l.TransactionTimeout,
		SkipUnattributed:             l.Unattributed == config.UnattributedSkip,
		ReturnHome:                   l.ReturnHome,
		SharedDestination:            l.SharedDestination,
		SettleDelay:                  l.SettleDelay,
		DiscoveryInterval:            l.DiscoveryInterval,
		DestinationReplicationFactor: l.DestinationReplicationFactor,
		CheckCRCs:                    l.CheckCRCs,
		GroupSyncInterval:            l.GroupSyncInterval,
		ConfigSync:                   link.ConfigSync(l.ConfigSync),
		ConfigSyncInterval:           l.ConfigSyncInterval,
		ACLSync:                      link.ACLSync(l.ACLSync),
		ACLSyncInterval:              l.ACLSyncInterval,
		Slots:                        l.Slots,
	}
	if l.Groups != nil { // a nil *config.Groups would make a non-nil selector
		s.Groups = l.Groups
	}
	if l.ShareGroups != nil {
		s.ShareGroups = l.ShareGroups
	}
	return s
}

// linkCluster is what a link needs of a cluster block; the credentials
// reach the link as kgo options (dial.Options), the principal they
// authenticate as for its ACL errors.
func linkCluster(c *config.Cluster) link.Cluster {
	return link.Cluster{
		Name:             c.Name,
		BootstrapServers: c.BootstrapServers,
		ClusterID:        c.ClusterID,
		Principal:        dial.Principal(c),
	}
}

// delivery is the link's delivery mode as the state records carry it.
func delivery(d config.Delivery) statestore.Delivery {
	if d == config.DeliveryTransactional {
		return statestore.DeliveryTransactional
	}
	return statestore.DeliveryPreserve
}
