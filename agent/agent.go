package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/link"
)

// Errors of New and Run.
var (
	// ErrListen: the HTTP listener could not bind agent.listen.
	ErrListen = errors.New("cannot listen")
	// ErrRunning: Run was called a second time.
	ErrRunning = errors.New("agent already ran")
)

// Timeouts of the agent's own I/O.
const (
	// PingTimeout bounds each cluster's start-up ping.
	PingTimeout = 15 * time.Second
	// httpShutdownTimeout bounds the HTTP server's graceful shutdown,
	// after the links have stopped; open connections are then closed.
	httpShutdownTimeout = 5 * time.Second
)

// Deps are the agent's collaborators.
type Deps struct {
	// Logger is the root logger (NewLogger builds it from the
	// configuration). Nil: discard.
	Logger hclog.Logger
	// Registry gets every metric. Nil: a new registry with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Options returns the kgo options that reach a cluster. Nil:
	// dial.Options.
	Options func(*config.Cluster) ([]kgo.Opt, error)
	// Tune, if set, adjusts each link's configuration after the agent
	// filled it in from the file (tests, the demo).
	Tune func(*link.Config)
	// Version is the release version for mirrord_build_info; "": what
	// the binary recorded (ReadBuild).
	Version string
	// History configures the status page's history of each link
	// (zero: one sample every 10s, one hour kept).
	History HistoryConfig
}

// Agent runs the links of one configuration and serves HTTP.
type Agent struct {
	cfg   *config.Config
	log   hclog.Logger
	reg   *prometheus.Registry
	links []*link.Link
	// slotted are the links with slots (slots above 1), whose slots the
	// agents running them share through a consumer group (slots.go).
	slotted []*slotRunner
	mux     *http.ServeMux
	// handler is mux behind the guard: what the listener serves.
	handler http.Handler
	guard   *guard
	tls     *tls.Config // nil: plain HTTP
	certs   *keyPair    // the listener's certificate, with tls
	limits  httpLimits
	hist    *history         // the status page's charts
	smp     *sampler         // fills hist; Run owns its goroutine
	now     func() time.Time // the clock of GET /v1/status

	// clusters are the clusters some link uses, in the order links name
	// them, with their kgo options, for the start-up pings.
	clusters []pingTarget

	ran      atomic.Bool
	stopping atomic.Bool
	ready    chan struct{}
	addrMu   sync.Mutex
	addr     net.Addr
}

type pingTarget struct {
	name string
	opts []kgo.Opt
}

// New builds an agent with a link per link block of cfg. It does no network
// I/O and starts no goroutine; it reads the TLS files the clusters name.
func New(cfg *config.Config, deps Deps) (*Agent, error) {
	if cfg == nil {
		return nil, errors.New("agent: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Registry == nil {
		deps.Registry = newRegistry()
	}
	if deps.Options == nil {
		deps.Options = dial.Options
	}
	deps.History.defaults()
	if err := deps.History.validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		cfg:    cfg,
		log:    deps.Logger.Named("agent"),
		reg:    deps.Registry,
		ready:  make(chan struct{}),
		limits: defaultHTTPLimits,
	}

	// Options per cluster, read once (they load the TLS files).
	base := map[string][]kgo.Opt{}
	var errs []error
	for _, l := range cfg.Links {
		for _, name := range []string{l.Source, l.Destination} {
			if _, done := base[name]; done {
				continue
			}
			opts, err := deps.Options(cfg.Clusters[name])
			if err != nil {
				errs = append(errs, err) // it names the cluster and the file
				base[name] = nil
				continue
			}
			base[name] = opts
			a.clusters = append(a.clusters, pingTarget{name: name, opts: opts})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	registerBuildInfo(a.reg, ReadBuild(deps.Version))
	linkMetrics := link.NewMetrics(a.reg)
	fetcherMetrics := fetcher.NewMetrics(a.reg)
	appenderMetrics := appender.NewMetrics(a.reg)
	kafka := map[[2]string]*kafkaMetrics{}
	clientOpts := func(cluster, role string) []kgo.Opt {
		k := kafka[[2]string{cluster, role}]
		if k == nil {
			k = newKafkaMetrics(a.reg, cluster, role)
			kafka[[2]string{cluster, role}] = k
		}
		log := deps.Logger.Named("kafka").With("cluster", cluster, "role", role)
		return append(slices.Clip(base[cluster]), kgo.WithHooks(k), kgo.WithLogger(newKgoLogger(log)))
	}

	var slotMet *slotMetrics
	for _, l := range cfg.Links {
		lc := LinkConfig(cfg, l)
		if deps.Tune != nil {
			deps.Tune(&lc)
		}
		ld := link.Deps{
			Logger:          deps.Logger,
			Metrics:         linkMetrics,
			FetcherMetrics:  fetcherMetrics,
			AppenderMetrics: appenderMetrics,
			SourceOpts:      clientOpts(l.Source, roleSource),
			DestinationOpts: clientOpts(l.Destination, roleDestination),
		}
		ln, err := link.New(lc, ld) // with slots: slot 0's, to validate what each slot's is
		if err != nil {
			errs = append(errs, fmt.Errorf("link %s: %w", l.Name, err))
			continue
		}
		if lc.Link.Slots > 1 {
			if slotMet == nil {
				slotMet = newSlotMetrics(a.reg)
			}
			a.slotted = append(a.slotted, newSlotRunner(lc, ld, ld.DestinationOpts, slotMet))
			continue
		}
		a.links = append(a.links, ln)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var err error
	if a.guard, err = newGuard(cfg.Agent.Admin, a.log.Named("http"), a.reg); err != nil {
		return nil, err
	}
	if a.tls, a.certs, err = listenerTLS(cfg.Agent.Admin, a.log.Named("http")); err != nil {
		return nil, err
	}
	names := make([]string, len(a.links))
	for i, l := range a.links {
		names[i] = l.Name()
	}
	a.hist = newHistory(deps.History, names)
	a.smp = newSampler(deps.History, a.hist, a.statuses)
	a.now = deps.History.Now
	a.mux = a.routes()
	a.handler = a.guard.wrap(a.mux)
	return a, nil
}

// Links returns the agent's links without slots in configuration order
// (a link with slots runs a Link per slot it owns: SlotStatuses).
func (a *Agent) Links() []*link.Link { return slices.Clone(a.links) }

// Handler is the HTTP API: the status page at /, /metrics, /healthz,
// /readyz, /v1/status and /v1/links, behind the access control and limits
// of agent.admin. Run serves it on agent.listen (with TLS when
// agent.admin.cert_file is set); it also works without Run (tests).
func (a *Agent) Handler() http.Handler { return a.handler }

// Ready is closed once Run listens; Addr then returns the bound address.
// It stays open if Run fails before it listens.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Addr is the address the HTTP server listens on (agent.listen with the
// port resolved), nil before Run listens.
func (a *Agent) Addr() net.Addr {
	a.addrMu.Lock()
	defer a.addrMu.Unlock()
	return a.addr
}

// Run listens on agent.listen, runs every link and serves HTTP until ctx
// ends. Then the links stop (each drains its in-flight appends and commits
// a final checkpoint), then the HTTP server shuts down. It returns nil on
// a clean stop; an error if the listener cannot bind (ErrListen), if the
// HTTP server fails, or if a link reports a broken invariant, and in the
// last two cases it stops everything else first. It waits for every
// goroutine it started. Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	listen := a.cfg.Agent.Listen
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("%w on agent.listen %q: %w (is another mirrord or another program using it? set agent.listen, or MIRRORD_AGENT__LISTEN, to a free host:port)",
			ErrListen, listen, err)
	}
	a.addrMu.Lock()
	a.addr = ln.Addr()
	a.addrMu.Unlock()
	if a.tls != nil {
		ln = tls.NewListener(ln, a.tls)
	}
	a.warnExposure()
	// Logged before Ready closes, so that whoever waits on Ready finds
	// the address in the log.
	a.log.Info("http listening", "addr", ln.Addr().String(), "tls", a.tls != nil, "auth", a.authMode(),
		"metrics", "/metrics", "api", "/v1/links")
	close(a.ready)

	srv := a.server()

	g, gctx := errgroup.WithContext(ctx)
	linksDone := make(chan struct{})
	g.Go(func() error {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("http server on %s: %w", ln.Addr(), err)
	})
	g.Go(func() error {
		defer close(linksDone)
		return a.runLinks(gctx)
	})
	g.Go(func() error {
		a.smp.run(gctx)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		a.stopping.Store(true)
		a.log.Info("stopping: links drain and commit their final checkpoints", "shutdown_timeout", a.cfg.Agent.ShutdownTimeout)
		<-linksDone
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		return nil
	})
	err = g.Wait()
	if err != nil {
		return err
	}
	a.log.Info("stopped")
	return nil
}

// server is the HTTP server of the listener, with its timeouts.
func (a *Agent) server() *http.Server {
	return &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: a.limits.readHeader,
		ReadTimeout:       a.limits.read,
		WriteTimeout:      a.limits.write,
		IdleTimeout:       a.limits.idle,
		MaxHeaderBytes:    a.limits.maxHeaderBytes,
		ErrorLog:          a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
	}
}

// authMode says how requests to the admin API are authenticated, for the
// start-up log.
func (a *Agent) authMode() string {
	ad := a.cfg.Agent.Admin
	var modes []string
	switch {
	case ad.TokenFile != "":
		modes = append(modes, "token from agent.admin.token_file "+ad.TokenFile)
	case ad.TokenEnv != "":
		modes = append(modes, "token from environment variable "+ad.TokenEnv)
	case ad.Token != "":
		modes = append(modes, "token")
	}
	if ad.ClientCAFile != "" {
		modes = append(modes, "client certificates")
	}
	if len(modes) == 0 {
		return "none"
	}
	return strings.Join(modes, " and ")
}

// warnExposure warns at start about a listener that other hosts reach
// without authentication, or with a token over plain HTTP.
func (a *Agent) warnExposure() {
	ag := a.cfg.Agent
	if ag.ListensOnLoopback() {
		return
	}
	switch ad := ag.Admin; {
	case ad.InsecureNoAuth:
		a.log.Warn("the admin API accepts requests without authentication from anyone who can reach agent.listen, who can pause and resume links (agent.admin.insecure_no_auth = true); set agent.admin.token_file or token_env",
			"listen", ag.Listen)
	case ad.Token != "" && a.tls == nil:
		a.log.Warn("the admin token crosses the network unencrypted; set agent.admin.cert_file and key_file for TLS", "listen", ag.Listen)
	}
}

// SlotStatuses are the statuses of the slots this agent runs, of every
// link with slots, in configuration and slot order.
func (a *Agent) SlotStatuses() []link.Status {
	var out []link.Status
	for _, r := range a.slotted {
		sts, _ := r.statuses()
		out = append(out, sts...)
	}
	return out
}

// statuses reads every link's status, in configuration order (links with
// slots are not among them: SlotStatuses).
func (a *Agent) statuses() []link.Status {
	out := make([]link.Status, len(a.links))
	for i, l := range a.links {
		out[i] = l.Status()
	}
	return out
}

// runLinks runs every link and pings every cluster until ctx ends.
func (a *Agent) runLinks(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range a.clusters {
		g.Go(func() error {
			a.ping(gctx, c)
			return nil
		})
	}
	for _, l := range a.links {
		g.Go(func() error {
			if err := l.Run(gctx); err != nil {
				return fmt.Errorf("link %s: %w", l.Name(), err)
			}
			return nil
		})
	}
	for _, r := range a.slotted {
		g.Go(func() error { return r.run(gctx) })
	}
	return g.Wait()
}

// ping connects to a cluster once at start-up and logs what it finds. A
// link retries on its own, so a cluster that is down does not stop the
// agent; the log says early and plainly why its links will not mirror.
func (a *Agent) ping(ctx context.Context, c pingTarget) {
	log := a.log.With("cluster", c.name)
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		log.Error("cannot build a client for the cluster", "error", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	err = dial.Ping(ctx, cl)
	switch {
	case err == nil:
		log.Info("cluster reachable")
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// the agent stopped first
	case errors.Is(err, dial.ErrAuthentication), errors.Is(err, dial.ErrTLS):
		log.Error("cluster refuses mirrord; its links retry, but will not mirror until the configuration or the cluster is fixed", "error", err)
	default:
		log.Warn("cluster not reachable at start; its links keep retrying", "error", err)
	}
}
