package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/translate"
)

// get sends a GET with the bearer token (none if empty).
func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Guards GET /v1/links/{name}/translate on a running agent: exact
// translations across an aborted transaction and its markers (source
// offsets 0-4 committed, 5 marker, 6-8 aborted, 9 marker, 10-13
// committed, 14 marker; mirrored at 0-8), the error reasons and statuses,
// parameter checks, and the admin token like every route under /v1/.
func TestTranslateEndpoint(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	hcl := strings.Replace(agentHCL(src, dst, ""), "agent {", "agent {\n  admin { token_env = \"ADMIN_TOKEN\" }", 1)
	a := newAgent(t, hcl, []string{"ADMIN_TOKEN=" + rightToken}, newLogBuffer(t), prometheus.NewRegistry())
	cl := kafkatest.Client(t, src, kgo.TransactionalID("txn"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{5, 3, 4} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "%d-%d", i, j)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(i != 1)); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, a)
	dstAdm := kadm.NewClient(kafkatest.Client(t, dst))
	waitFor(t, func() (bool, string) {
		ends, err := dstAdm.ListEndOffsets(ctx, "orders")
		o, _ := ends.Lookup("orders", 0)
		return err == nil && o.Offset == 9, fmt.Sprintf("destination end offset %d (%v)", o.Offset, err)
	})
	url := func(q string) string { return r.base + "/v1/links/l/translate?" + q }

	for _, c := range []struct{ offset, want int64 }{{0, 0}, {3, 3}, {5, 5}, {6, 5}, {9, 5}, {11, 6}, {13, 8}, {14, 9}, {15, 9}} {
		code, body := get(t, url(fmt.Sprintf("topic=orders&partition=0&offset=%d", c.offset)), rightToken)
		var tr translate.Result
		if err := json.Unmarshal(body, &tr); code != http.StatusOK || err != nil {
			t.Fatalf("offset %d: %d %s", c.offset, code, body)
		}
		if tr.DestinationOffset != c.want || tr.SourceOffset != c.offset || tr.SourceTopic != "orders" || tr.DestinationTopic != "orders" {
			t.Errorf("offset %d: %+v, want destination offset %d", c.offset, tr, c.want)
		}
	}

	for _, c := range []struct {
		name, query, token string
		code               int
		reason, message    string
	}{
		{"no token", "topic=orders&partition=0&offset=1", "", http.StatusUnauthorized, "", "Authorization: Bearer"},
		{"wrong token", "topic=orders&partition=0&offset=1", wrongToken, http.StatusForbidden, "", "the admin token is wrong"},
		{"not selected", "topic=private&partition=0&offset=1", rightToken, http.StatusNotFound, "not_mirrored", `does not select topic "private"`},
		{"no partition", "topic=orders&partition=4&offset=1", rightToken, http.StatusNotFound, "not_mirrored", "no partition orders[4]"},
		{"past the end", "topic=orders&partition=0&offset=16", rightToken, http.StatusUnprocessableEntity, "past_source_end", "high watermark is 15"},
		{"no topic", "partition=0&offset=1", rightToken, http.StatusBadRequest, "", "needs topic, partition and offset"},
		{"bad partition", "topic=orders&partition=x&offset=1", rightToken, http.StatusBadRequest, "", `partition "x"`},
		{"negative offset", "topic=orders&partition=0&offset=-1", rightToken, http.StatusBadRequest, "", `offset "-1"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := get(t, url(c.query), c.token)
			var e TranslateError
			_ = json.Unmarshal(body, &e)
			if code != c.code || e.Reason != c.reason || !strings.Contains(e.Error, c.message) {
				t.Errorf("%d %s; want %d, reason %q, an error with %q", code, body, c.code, c.reason, c.message)
			}
		})
	}
	if code, body := get(t, r.base+"/v1/links/nope/translate?topic=orders&partition=0&offset=1", rightToken); code != http.StatusNotFound {
		t.Errorf("unknown link: %d %s", code, body)
	}
}
