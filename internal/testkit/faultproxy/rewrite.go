package faultproxy

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// endpointType of DescribeCluster v1+: the endpoints are controllers, which
// the proxy does not stand in front of.
const endpointControllers int8 = 2

// rewrite returns the body of a response to key at version with every
// broker endpoint replaced by the proxy's address for that node, or nil
// when the response names no endpoint or every endpoint is already the
// proxy's: then the original bytes go on unchanged. Metadata responses also
// teach the proxy topic names by ID (for ProduceTo on Produce v13).
func (p *Proxy) rewrite(key, version int16, body []byte) ([]byte, error) {
	switch {
	case key == keyMetadata, key == keyFindCoordinator, key == keyDescribeCluster,
		key == keyShareFetch, key == keyShareAcknowledge,
		key == keyProduce && version >= 10, // KIP-951 leader hints
		key == keyFetch && version >= 16:
	default:
		return nil, nil
	}
	resp := kmsg.ResponseForKey(key)
	resp.SetVersion(version)
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%w: decode %s v%d response to rewrite its endpoints: %v", errProtocol, kmsg.NameForKey(key), version, err)
	}
	where := fmt.Sprintf("%s v%d response", kmsg.NameForKey(key), version)
	changed := false
	ep := func(id int32, host *string, port *int32) {
		if id < 0 { // no coordinator, no leader
			return
		}
		n := p.nodes[id]
		if n == nil {
			p.unmapped(id, where)
			return
		}
		if *host != n.host || *port != n.port {
			*host, *port = n.host, n.port
			changed = true
		}
	}
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			b := &r.Brokers[i]
			ep(b.NodeID, &b.Host, &b.Port)
		}
		for _, t := range r.Topics {
			if t.Topic != nil {
				p.learnTopic(t.TopicID, *t.Topic)
			}
		}
	case *kmsg.FindCoordinatorResponse:
		if version < 4 {
			if r.ErrorCode == 0 {
				ep(r.NodeID, &r.Host, &r.Port)
			}
		}
		for i := range r.Coordinators {
			c := &r.Coordinators[i]
			if c.ErrorCode == 0 {
				ep(c.NodeID, &c.Host, &c.Port)
			}
		}
	case *kmsg.DescribeClusterResponse:
		if r.EndpointType != endpointControllers {
			for i := range r.Brokers {
				b := &r.Brokers[i]
				ep(b.NodeID, &b.Host, &b.Port)
			}
		}
	case *kmsg.ProduceResponse:
		for i := range r.Brokers {
			b := &r.Brokers[i]
			ep(b.NodeID, &b.Host, &b.Port)
		}
	case *kmsg.FetchResponse:
		for i := range r.Brokers {
			b := &r.Brokers[i]
			ep(b.NodeID, &b.Host, &b.Port)
		}
	case *kmsg.ShareFetchResponse:
		for i := range r.NodeEndpoints {
			b := &r.NodeEndpoints[i]
			ep(b.NodeID, &b.Host, &b.Port)
		}
	case *kmsg.ShareAcknowledgeResponse:
		for i := range r.NodeEndpoints {
			b := &r.NodeEndpoints[i]
			ep(b.NodeID, &b.Host, &b.Port)
		}
	}
	if !changed {
		return nil, nil
	}
	return resp.AppendTo(nil), nil
}
