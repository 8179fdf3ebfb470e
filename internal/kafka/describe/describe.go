// Package describe reads topics' settings (DescribeConfigs) so that each
// topic's answer stands on its own: a topic the cluster refuses has the
// refusal as its own error, and the other topics of the same request their
// settings.
//
// kadm's DescribeTopicConfigs (v1.20) does not: when any topic of a request
// answers an authorization error, the whole call returns that error and
// the topics after it in the answer are left out, so one topic without
// DescribeConfigs made every later topic look refused too (a caller then
// names the wrong topic, or gives up on topics it may read). The request
// and the answer's fields are the same as kadm's.
//
// The package starts no goroutines and keeps no state; it runs on its
// caller's goroutine.
package describe

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicConfigs describes the topics' settings (with synonyms) through cl.
// Each topic the cluster answers is in the result with its settings or its
// own error (ResourceConfig.Err: a refusal, an unknown topic). The error
// is that of a request that got no answer (the first, when kgo split the
// request); the topics it carried are not in the result, and the result's
// On reports them missing.
func TopicConfigs(ctx context.Context, cl *kgo.Client, topics ...string) (kadm.ResourceConfigs, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeSynonyms = true
	for _, t := range topics {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceName, rr.ResourceType = t, kmsg.ConfigResourceTypeTopic
		req.Resources = append(req.Resources, rr)
	}
	var (
		out      kadm.ResourceConfigs
		firstErr error
	)
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			if firstErr == nil {
				firstErr = sh.Err
			}
			continue
		}
		resp, ok := sh.Resp.(*kmsg.DescribeConfigsResponse)
		if !ok {
			continue
		}
		for _, r := range resp.Resources {
			rc := kadm.ResourceConfig{Name: r.ResourceName, Err: kerr.ErrorForCode(r.ErrorCode)}
			if r.ErrorMessage != nil {
				rc.ErrMessage = *r.ErrorMessage
			}
			for _, c := range r.Configs {
				cfg := kadm.Config{Key: c.Name, Value: c.Value, Sensitive: c.IsSensitive, Source: c.Source}
				for _, syn := range c.ConfigSynonyms {
					cfg.Synonyms = append(cfg.Synonyms, kadm.ConfigSynonym{Key: syn.Name, Value: syn.Value, Source: syn.Source})
				}
				rc.Configs = append(rc.Configs, cfg)
			}
			out = append(out, rc)
		}
	}
	return out, firstErr
}
