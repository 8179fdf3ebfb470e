package faultproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// testProxy is a Proxy with nodes 1 and 2 and no listeners: enough for the
// codec functions.
func testProxy(t testing.TB) *Proxy {
	return &Proxy{
		t: t,
		nodes: map[int32]*node{
			1: {id: 1, host: "127.0.0.1", port: 1001},
			2: {id: 2, host: "127.0.0.1", port: 1002},
		},
		names:   map[[16]byte]string{},
		unknown: map[int32]bool{},
	}
}

// Guards the request header parse on each header version: the body the
// proxy hands on starts exactly where kmsg's encoding of the request does.
func TestParseRequestHeader(t *testing.T) {
	produce := func(v int16) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(v)
		r.Acks = -1
		return r
	}
	for _, tc := range []struct {
		name     string
		req      kmsg.Request
		clientID *string
		wantCID  string
	}{
		{"produce v3 (header v1)", produce(3), new("cid"), "cid"},
		{"produce v9 (header v2)", produce(9), new("flexible"), "flexible"},
		{"api versions v3 (header v2)", func() kmsg.Request { r := kmsg.NewPtrApiVersionsRequest(); r.SetVersion(3); return r }(), new("x"), "x"},
		{"metadata v12, null client ID", func() kmsg.Request { r := kmsg.NewPtrMetadataRequest(); r.SetVersion(12); return r }(), nil, ""},
		{"controlled shutdown v0 (header v0)", func() kmsg.Request { r := kmsg.NewPtrControlledShutdownRequest(); r.SetVersion(0); return r }(), new("ignored"), ""},
		{"controlled shutdown v1 (header v1)", func() kmsg.Request { r := kmsg.NewPtrControlledShutdownRequest(); r.SetVersion(1); return r }(), new("cs"), "cs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *kmsg.RequestFormatter
			if tc.clientID != nil {
				f = kmsg.NewRequestFormatter(kmsg.FormatterClientID(*tc.clientID))
			} else {
				f = kmsg.NewRequestFormatter()
			}
			frame := f.AppendRequest(nil, tc.req, 4242)
			if tc.req.Key() == keyControlledShutdown && tc.req.GetVersion() == 0 {
				// kmsg's formatter writes only the header of this
				// one: size, key, version, correlation ID, body.
				frame = binary.BigEndian.AppendUint32(nil, 0)
				frame = binary.BigEndian.AppendUint16(frame, uint16(keyControlledShutdown))
				frame = binary.BigEndian.AppendUint16(frame, 0)
				frame = binary.BigEndian.AppendUint32(frame, 4242)
				frame = tc.req.AppendTo(frame)
			}
			h, err := parseRequestHeader(frame[4:])
			if err != nil {
				t.Fatal(err)
			}
			if h.key != tc.req.Key() || h.version != tc.req.GetVersion() || h.corr != 4242 || h.clientID != tc.wantCID {
				t.Fatalf("header %+v, want key %d v%d corr 4242 client %q", h, tc.req.Key(), tc.req.GetVersion(), tc.wantCID)
			}
			if body := frame[4+h.len:]; !bytes.Equal(body, tc.req.AppendTo(nil)) {
				t.Fatalf("body after a %d-byte header differs from the request's encoding", h.len)
			}
		})
	}
	for _, n := range []int{0, 7} {
		if _, err := parseRequestHeader(make([]byte, n)); err == nil {
			t.Errorf("a %d-byte request parsed", n)
		}
	}
	// A client ID that claims more bytes than there are.
	bad := binary.BigEndian.AppendUint16(make([]byte, 8), 50)
	if _, err := parseRequestHeader(bad); err == nil {
		t.Error("a truncated client ID parsed")
	}
}

// Guards the response header length: ApiVersions always answers with
// header v0, other flexible responses carry tagged fields after the
// correlation ID.
func TestResponseHeaderLen(t *testing.T) {
	corr := []byte{0, 0, 0, 9}
	for _, tc := range []struct {
		name    string
		b       []byte
		key, v  int16
		want    int
		wantErr bool
	}{
		{"api versions v3", append(corr, 0, 1, 2), keyAPIVersions, 3, 4, false},
		{"metadata v8 (header v0)", append(corr, 0, 0), keyMetadata, 8, 4, false},
		{"metadata v12 no tags", append(corr, 0, 7), keyMetadata, 12, 5, false},
		{"metadata v12 one tag", append(corr, 1, 0, 2, 0xa, 0xb, 7), keyMetadata, 12, 9, false},
		{"unknown key", append(corr, 1, 2), 9999, 0, 4, false},
		{"no correlation ID", []byte{0, 1}, keyMetadata, 12, 0, true},
		{"truncated tag", append(corr, 1, 0, 9, 1), keyMetadata, 12, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := responseHeaderLen(tc.b, tc.key, tc.v)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// Guards the acks=0 detection on every Produce version: a wrong answer
// either waits for a response that never comes or lets responses fall out
// of step with requests.
func TestProduceAcks(t *testing.T) {
	for v := int16(0); v <= kmsg.NewPtrProduceRequest().MaxVersion(); v++ {
		for _, acks := range []int16{0, 1, -1} {
			for _, txn := range []*string{nil, new("a-transactional-id")} {
				r := kmsg.NewPtrProduceRequest()
				r.SetVersion(v)
				r.Acks, r.TransactionID = acks, txn
				got, ok := produceAcks(r.AppendTo(nil), v)
				if !ok || got != acks {
					t.Errorf("v%d acks %d txn %v: got %d, %v", v, acks, txn != nil, got, ok)
				}
			}
		}
	}
	if _, ok := produceAcks([]byte{0}, 3); ok {
		t.Error("a one-byte body gave acks")
	}
}

// endpointFn gives a node's endpoint in a test response.
type endpointFn func(id int32) (string, int32)

// upstreamEP is what a broker says: broker-<id>:909<id>.
func upstreamEP(id int32) (string, int32) { return fmt.Sprintf("broker-%d", id), 9090 + id }

// proxiedEP is what the client must get from testProxy: nodes 1 and 2 on
// the proxy, any other left as the broker said.
func proxiedEP(id int32) (string, int32) {
	if id == 1 || id == 2 {
		return "127.0.0.1", 1000 + id
	}
	return upstreamEP(id)
}

var topicID = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// rewriteCases build a response of each kind the proxy rewrites, naming
// nodes 1, 2 and 7 (not proxied) where the kind allows, for each version.
var rewriteCases = []struct {
	key      int16
	min      int16
	build    func(v int16, ep endpointFn) kmsg.Response
	unchange bool // the proxy must leave it alone
}{
	{key: keyMetadata, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrMetadataResponse()
		r.SetVersion(v)
		for _, id := range []int32{1, 2, 7} {
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID = id
			b.Host, b.Port = ep(id)
			b.Rack = new("rack")
			r.Brokers = append(r.Brokers, b)
		}
		tp := kmsg.NewMetadataResponseTopic()
		tp.Topic, tp.TopicID = new("learned"), topicID
		tp.Partitions = []kmsg.MetadataResponseTopicPartition{{Partition: 0, Leader: 2, Replicas: []int32{2, 1}, ISR: []int32{2, 1}}}
		r.Topics = append(r.Topics, tp)
		return r
	}},
	{key: keyFindCoordinator, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrFindCoordinatorResponse()
		r.SetVersion(v)
		r.NodeID = 2
		r.Host, r.Port = ep(2)
		for _, id := range []int32{1, 7} {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID = fmt.Sprintf("group-%d", id), id
			c.Host, c.Port = ep(id)
			r.Coordinators = append(r.Coordinators, c)
		}
		none := kmsg.NewFindCoordinatorResponseCoordinator()
		none.Key, none.NodeID, none.ErrorCode, none.Port = "loading", -1, 14, -1
		r.Coordinators = append(r.Coordinators, none)
		return r
	}},
	{key: keyDescribeCluster, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrDescribeClusterResponse()
		r.SetVersion(v)
		r.EndpointType = 1
		r.ClusterID, r.ControllerID = "cluster", 1
		for _, id := range []int32{1, 2, 7} {
			b := kmsg.NewDescribeClusterResponseBroker()
			b.NodeID = id
			b.Host, b.Port = ep(id)
			r.Brokers = append(r.Brokers, b)
		}
		return r
	}},
	{key: keyDescribeCluster, min: 1, unchange: true, build: func(v int16, _ endpointFn) kmsg.Response {
		r := kmsg.NewPtrDescribeClusterResponse()
		r.SetVersion(v)
		r.EndpointType = endpointControllers
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = 1, "controller-1", 9093
		r.Brokers = append(r.Brokers, b)
		return r
	}},
	{key: keyProduce, min: 10, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrProduceResponse()
		r.SetVersion(v)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = "t", topicID
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.ErrorCode = 6
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = 1, 3
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		for _, id := range []int32{1, 7} {
			b := kmsg.NewProduceResponseBroker()
			b.NodeID = id
			b.Host, b.Port = ep(id)
			r.Brokers = append(r.Brokers, b)
		}
		return r
	}},
	{key: keyFetch, min: 16, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrFetchResponse()
		r.SetVersion(v)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = "t", topicID
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.ErrorCode = 6
		rp.RecordBatches = []byte("opaque batch bytes")
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		b := kmsg.NewFetchResponseBroker()
		b.NodeID = 2
		b.Host, b.Port = ep(2)
		r.Brokers = append(r.Brokers, b)
		return r
	}},
	{key: keyShareFetch, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrShareFetchResponse()
		r.SetVersion(v)
		e := kmsg.NewShareFetchResponseNodeEndpoint()
		e.NodeID = 1
		e.Host, e.Port = ep(1)
		r.NodeEndpoints = append(r.NodeEndpoints, e)
		return r
	}},
	{key: keyShareAcknowledge, build: func(v int16, ep endpointFn) kmsg.Response {
		r := kmsg.NewPtrShareAcknowledgeResponse()
		r.SetVersion(v)
		e := kmsg.NewShareAcknowledgeResponseNodeEndpoint()
		e.NodeID = 2
		e.Host, e.Port = ep(2)
		r.NodeEndpoints = append(r.NodeEndpoints, e)
		return r
	}},
}

// Guards the endpoint rewrite of every kind and version: the proxied nodes
// get the proxy's address, everything else in the response is re-encoded
// as it was, a node without a listener is left alone, and a response with
// nothing to change goes on as its original bytes.
func TestRewriteEndpoints(t *testing.T) {
	for _, tc := range rewriteCases {
		for v := tc.min; v <= tc.build(0, upstreamEP).MaxVersion(); v++ {
			t.Run(fmt.Sprintf("%s v%d", kmsg.NameForKey(tc.key), v), func(t *testing.T) {
				p := testProxy(t)
				in := tc.build(v, upstreamEP).AppendTo(nil)
				got, err := p.rewrite(tc.key, v, in)
				if err != nil {
					t.Fatal(err)
				}
				if tc.unchange {
					if got != nil {
						t.Fatal("rewrote a response it must leave alone")
					}
					return
				}
				if want := tc.build(v, proxiedEP).AppendTo(nil); !bytes.Equal(got, want) {
					t.Fatalf("rewritten response differs from the one with the proxy's endpoints\ngot  %x\nwant %x", got, want)
				}
				again, err := p.rewrite(tc.key, v, got)
				if err != nil || again != nil {
					t.Fatalf("a rewritten response was rewritten again (%v)", err)
				}
				if tc.key == keyMetadata && v >= 10 && p.topicName(topicID) != "learned" {
					t.Fatalf("Metadata v%d did not teach the topic's name by ID", v)
				}
			})
		}
	}
	p := testProxy(t)
	if _, err := p.rewrite(keyMetadata, 12, []byte{0, 0, 0}); err == nil {
		t.Error("a truncated Metadata response rewrote")
	}
}

// Guards ProduceError on every version a broker answers with record
// batches: the body decodes as that version's ProduceResponse and answers
// each partition of the request, named as the request names it.
func TestProduceError(t *testing.T) {
	p := testProxy(t)
	for v := int16(3); v <= kmsg.NewPtrProduceRequest().MaxVersion(); v++ {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.Acks = -1
		for i, name := range []string{"a", "b"} {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = name, topicID
			rt.TopicID[0] = byte(i)
			for _, part := range []int32{0, 5} {
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = part, []byte("batch")
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		p.learnTopic(req.Topics[0].TopicID, "a")
		p.learnTopic(req.Topics[1].TopicID, "b")
		f := &Frame{APIKey: keyProduce, Version: v, Request: req.AppendTo(nil), p: p}
		body := ProduceError(f, 6)
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(v)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		var got []string
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				got = append(got, fmt.Sprintf("%s/%x/%d:%d@%d", rt.Topic, rt.TopicID[0], rp.Partition, rp.ErrorCode, rp.BaseOffset))
			}
		}
		// Up to v12 topics go by name, from v13 by ID only.
		want := fmt.Sprint([]string{"a/0/0:6@-1", "a/0/5:6@-1", "b/0/0:6@-1", "b/0/5:6@-1"})
		if v >= 13 {
			want = fmt.Sprint([]string{"/0/0:6@-1", "/0/5:6@-1", "/1/0:6@-1", "/1/5:6@-1"})
		}
		if fmt.Sprint(got) != want {
			t.Errorf("v%d: response answers %v, want %v", v, got, want)
		}
		parts, ok := ProduceTo(f)
		if !ok || len(parts) != 4 || parts[2].Topic != "b" || parts[3].Partition != 5 {
			t.Errorf("v%d: ProduceTo gave %+v, %v", v, parts, ok)
		}
	}
	if ProduceError(&Frame{APIKey: keyFetch}, 6) != nil {
		t.Error("ProduceError answered a Fetch")
	}
}

// Guards the header parse against any input: no panic, and the header
// never claims more bytes than the frame has.
func FuzzParseRequestHeader(f *testing.F) {
	f.Add(kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1)[4:])
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrProduceRequest(), 2)[4:])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseRequestHeader(b)
		if err == nil && (h.len < 8 || h.len > len(b)) {
			t.Fatalf("header of %d bytes in a %d-byte request", h.len, len(b))
		}
		if err == nil && h.key == keyProduce {
			produceAcks(b[h.len:], h.version)
		}
		if _, err := responseHeaderLen(b, int16(len(b)%80), int16(len(b)%14)); err != nil {
			return
		}
	})
}

// Guards the rewrite against any response body: no panic, and what it
// writes decodes and names nodes 1 and 2 at the proxy.
func FuzzRewrite(f *testing.F) {
	for _, tc := range rewriteCases {
		v := tc.build(0, upstreamEP).MaxVersion()
		f.Add(tc.key, v, tc.build(v, upstreamEP).AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, key, v int16, body []byte) {
		p := testProxy(t)
		got, err := p.rewrite(key, v, body)
		if err != nil || got == nil {
			return
		}
		resp := kmsg.ResponseForKey(key)
		resp.SetVersion(v)
		if err := resp.ReadFrom(got); err != nil {
			t.Fatalf("rewritten %s v%d does not decode: %v", kmsg.NameForKey(key), v, err)
		}
		again, err := p.rewrite(key, v, got)
		if err != nil || again != nil {
			t.Fatalf("rewritten %s v%d rewritten again (%v)", kmsg.NameForKey(key), v, err)
		}
	})
}
