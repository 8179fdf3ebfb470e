package faultproxy

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Brokers returns the brokers of cl's cluster (node ID to host:port) from a
// Metadata request that asks for no topics: the map Start takes. cl must
// reach the brokers directly.
func Brokers(ctx context.Context, cl *kgo.Client) (map[int32]string, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none; nil would be all
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if resp.ErrorCode != 0 {
		return nil, fmt.Errorf("metadata: %w", kerr.ErrorForCode(resp.ErrorCode))
	}
	if len(resp.Brokers) == 0 {
		return nil, fmt.Errorf("metadata: no brokers")
	}
	out := make(map[int32]string, len(resp.Brokers))
	for _, b := range resp.Brokers {
		out[b.NodeID] = hostPort(b.Host, b.Port)
	}
	return out, nil
}
