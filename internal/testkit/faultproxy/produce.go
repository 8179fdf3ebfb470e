package faultproxy

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicPartition is one partition a Produce request writes.
type TopicPartition struct {
	// Topic is the topic's name: from the request up to Produce v12; from
	// v13, which names topics by ID only, the name a Metadata response
	// through the proxy gave for TopicID ("" when none did).
	Topic string
	// TopicID is the topic's ID from v13 on (zero before).
	TopicID   [16]byte
	Partition int32
}

// ProduceTo returns the partitions a Produce request writes, for a request
// frame or a response frame (its request). ok is false when f is no
// Produce or its request does not decode.
func ProduceTo(f *Frame) (parts []TopicPartition, ok bool) {
	req, ok := produceRequest(f)
	if !ok {
		return nil, false
	}
	for _, t := range req.Topics {
		name := t.Topic
		if req.Version >= 13 && f.p != nil {
			name = f.p.topicName(t.TopicID)
		}
		for _, pt := range t.Partitions {
			parts = append(parts, TopicPartition{Topic: name, TopicID: t.TopicID, Partition: pt.Partition})
		}
	}
	return parts, true
}

// Writes reports whether f is a Produce (request or response) that writes
// partition of topic (by name; on v13 through the name the proxy learned
// for the request's topic ID).
func (f *Frame) Writes(topic string, partition int32) bool {
	parts, _ := ProduceTo(f)
	for _, tp := range parts {
		if tp.Topic == topic && tp.Partition == partition {
			return true
		}
	}
	return false
}

// ProduceError returns the body of a ProduceResponse of f's version that
// answers every partition of f's Produce request with the error code (no
// offsets: -1), for Replace. It returns nil when f is no Produce.
func ProduceError(f *Frame, code int16) []byte {
	req, ok := produceRequest(f)
	if !ok {
		return nil
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.Version)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, pt := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = pt.Partition
			rp.ErrorCode = code
			rp.BaseOffset = -1
			rp.LogAppendTime = -1
			rp.LogStartOffset = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp.AppendTo(nil)
}

func produceRequest(f *Frame) (*kmsg.ProduceRequest, bool) {
	if f == nil || f.APIKey != keyProduce {
		return nil, false
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(f.Version)
	if err := req.ReadFrom(f.Request); err != nil {
		return nil, false
	}
	return req, true
}
