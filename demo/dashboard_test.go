package demo

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/link"
)

const dashboardPath = "../deploy/grafana/mirrord.json"

// metricInfo is one metric family the code registers.
type metricInfo struct {
	kind   string // counter, gauge, histogram
	labels []string
	help   string
}

// descRE reads a prometheus.Desc's String(), the only public form of its
// name, help and labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// recorder is a Registerer that notes every metric family registered
// through it, children or not, and registers it on reg.
type recorder struct {
	t       *testing.T
	reg     *prometheus.Registry
	metrics map[string]metricInfo
}

func (r *recorder) Register(c prometheus.Collector) error {
	kind := ""
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge: // before Counter: a Gauge is also a Counter
		kind = "gauge"
	case *prometheus.CounterVec, prometheus.Counter:
		kind = "counter"
	case *prometheus.HistogramVec, prometheus.Histogram:
		kind = "histogram"
	default:
		r.t.Fatalf("collector %T: add its kind to the recorder", c)
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			r.t.Fatalf("cannot read descriptor %s (did client_golang change Desc.String?)", d)
		}
		var labels []string
		for part := range strings.SplitSeq(m[3]+","+m[4], ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(part), "="); name != "" {
				labels = append(labels, name)
			}
		}
		r.metrics[m[1]] = metricInfo{kind: kind, labels: labels, help: m[2]}
	}
	return r.reg.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// registeredMetrics are the mirrord metric families the code registers:
// the link, fetcher and appender sets, recorded as they register (a vector
// without children is not gathered), and whatever an agent registers when
// it is built, gathered from a fresh registry.
func registeredMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	rec := &recorder{t: t, reg: prometheus.NewRegistry(), metrics: map[string]metricInfo{}}
	link.NewMetrics(rec)
	fetcher.NewMetrics(rec)
	appender.NewMetrics(rec)

	reg := prometheus.NewRegistry()
	if _, err := agent.New(config.Default(), agent.Deps{Registry: reg}); err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := rec.metrics
	for _, mf := range mfs {
		if _, ok := out[mf.GetName()]; ok {
			continue
		}
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		out[mf.GetName()] = metricInfo{
			kind:   strings.ToLower(dto.MetricType_name[int32(mf.GetType())]),
			labels: slices.Sorted(maps.Keys(labels)),
			help:   mf.GetHelp(),
		}
	}
	if _, ok := out["mirrord_records_mirrored_total"]; !ok {
		t.Fatal("mirrord_records_mirrored_total not collected: the collection is broken")
	}
	return out
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where, expr, legend string
}

var (
	metricRE   = regexp.MustCompile(`\bmirrord_[a-zA-Z0-9_]+`)
	selectorRE = regexp.MustCompile(`\b(mirrord_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byRE       = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	legendRE   = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// TestDashboardUsesRegisteredMetrics: deploy/grafana/mirrord.json is a
// Grafana dashboard with the datasource and link variables, and every
// expression in it names only metrics and labels that the code registers,
// so that a renamed metric or a typo does not leave an empty panel.
func TestDashboardUsesRegisteredMetrics(t *testing.T) {
	metrics := registeredMetrics(t)
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		SchemaVersion int `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Definition string          `json:"definition"`
				Datasource *datasourceRef  `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dash.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or later", dash.SchemaVersion)
	}

	var queries []query
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			var q string
			if v.Type != "datasource" || json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				t.Errorf("variable datasource: type %q query %s, want a datasource variable of type prometheus", v.Type, v.Query)
			}
		case "link":
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("variable link: query %s: %v", v.Query, err)
			}
			const want = "label_values(mirrord_link_state, link)"
			if v.Type != "query" || q.Query != want || v.Definition != want {
				t.Errorf("variable link: type %q query %q definition %q, want a query variable %q", v.Type, q.Query, v.Definition, want)
			}
			checkDatasource(t, "variable link", v.Datasource)
			queries = append(queries, query{where: "variable link", expr: q.Query})
		}
	}
	if !vars["datasource"] || !vars["link"] {
		t.Errorf("variables %v, want datasource and link", slices.Sorted(maps.Keys(vars)))
	}

	ids := map[int]string{}
	for _, p := range flatten(dash.Panels) {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("%s: id already used by %s", where, prev)
		}
		ids[p.ID] = where
		if p.Type == "row" {
			continue
		}
		checkDatasource(t, where, p.Datasource)
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		for _, tg := range p.Targets {
			checkDatasource(t, where+" target "+tg.RefID, tg.Datasource)
			queries = append(queries, query{where: where + " target " + tg.RefID, expr: tg.Expr, legend: tg.LegendFormat})
		}
	}

	used := map[string]bool{}
	for _, q := range queries {
		for _, name := range checkQuery(t, q, metrics) {
			used[name] = true
		}
	}

	// What the dashboard must show (issue 5): these families appear in
	// some expression.
	for _, name := range []string{
		"mirrord_link_state", "mirrord_records_mirrored_total", "mirrord_bytes_mirrored_total",
		"mirrord_lag_records", "mirrord_partition_lag_records", "mirrord_append_latency_seconds",
		"mirrord_fetch_errors_total", "mirrord_append_errors_total", "mirrord_errors_total",
		"mirrord_collisions_resolved_total", "mirrord_collisions_unresolvable_total",
		"mirrord_barriers_emitted_total", "mirrord_duplicates_skipped_total", "mirrord_sequence_gaps_total",
		"mirrord_sessions_fenced_total", "mirrord_unknown_outcomes_total", "mirrord_batches_reencoded_total",
		"mirrord_fetch_buffered_bytes",
	} {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

// checkQuery checks one expression against the registered metrics and
// returns the families it uses.
func checkQuery(t *testing.T, q query, metrics map[string]metricInfo) []string {
	t.Helper()
	if strings.Count(q.expr, "(") != strings.Count(q.expr, ")") || strings.Count(q.expr, "{") != strings.Count(q.expr, "}") {
		t.Errorf("%s: unbalanced brackets in %q", q.where, q.expr)
	}
	family := func(name string) (string, metricInfo, bool) {
		if m, ok := metrics[name]; ok {
			return name, m, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if m, ok := metrics[base]; ok && m.kind == "histogram" {
					if suffix == "_bucket" {
						m.labels = append(slices.Clone(m.labels), "le")
					}
					return base, m, true
				}
			}
		}
		return "", metricInfo{}, false
	}

	names := metricRE.FindAllString(q.expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q uses no mirrord metric", q.where, q.expr)
	}
	var families []string
	labels := map[string]bool{}
	for _, name := range names {
		fam, m, ok := family(name)
		if !ok {
			t.Errorf("%s: %s is not a metric the code registers (in %q)", q.where, name, q.expr)
			continue
		}
		families = append(families, fam)
		for _, l := range m.labels {
			labels[l] = true
		}
		if q.legend != "" && slices.Contains(m.labels, "link") && !strings.Contains(q.expr, name+`{link=~"$link"`) {
			t.Errorf("%s: %s is not filtered by the link variable (in %q)", q.where, name, q.expr)
		}
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(q.expr, -1) {
		_, m, ok := family(sel[1])
		if !ok {
			continue
		}
		for _, mm := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			if !slices.Contains(m.labels, mm[1]) {
				t.Errorf("%s: %s has no label %q (in %q)", q.where, sel[1], mm[1], q.expr)
			}
		}
	}
	// Labels an aggregation keeps must exist; a legend can only show
	// labels that the result keeps.
	result := labels
	if bys := byRE.FindAllStringSubmatch(q.expr, -1); len(bys) > 0 {
		result = map[string]bool{}
		for _, by := range bys {
			for l := range strings.SplitSeq(by[1], ",") {
				l = strings.TrimSpace(l)
				if !labels[l] {
					t.Errorf("%s: aggregation by %q, a label none of its metrics has (in %q)", q.where, l, q.expr)
				}
				if l != "le" || !strings.Contains(q.expr, "histogram_quantile") {
					result[l] = true
				}
			}
		}
	}
	for _, lg := range legendRE.FindAllStringSubmatch(q.legend, -1) {
		if !result[lg[1]] {
			t.Errorf("%s: legend %q shows label %q, which the result of %q does not have", q.where, q.legend, lg[1], q.expr)
		}
	}
	return families
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func checkDatasource(t *testing.T, where string, ds *datasourceRef) {
	t.Helper()
	if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: datasource %+v, want the datasource variable", where, ds)
	}
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}
