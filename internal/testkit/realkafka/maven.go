package realkafka

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The tools the real tier needs. Both errors are one line that says what to
// install; ForTest turns them into a skip (or a failure under CI=true).
var (
	ErrNoJava  = errors.New("java not found on PATH: install a JDK 17 or later (Debian: apt-get install openjdk-17-jdk-headless)")
	ErrNoMaven = errors.New("mvn not found on PATH: install Maven (Debian: apt-get install maven)")
)

// ErrJavaTooOld is returned (wrapped, with the version found) for a java
// older than 17, which Kafka 4 brokers and clients need.
var ErrJavaTooOld = errors.New("install a JDK 17 or later (Debian: apt-get install openjdk-17-jdk-headless)")

// mvnRuns counts the Maven processes this process started (tests check that
// a cached resolution starts none).
var mvnRuns atomic.Int64

// Java returns the path of the java on PATH, checked to be version 17 or
// later.
func Java(ctx context.Context) (string, error) {
	path, err := exec.LookPath("java")
	if err != nil {
		return "", ErrNoJava
	}
	javaChecked.Lock()
	defer javaChecked.Unlock()
	if _, ok := javaChecked.build[path]; ok {
		return path, nil
	}
	out, err := exec.CommandContext(ctx, path, "-version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -version: %w: %s", path, err, firstLine(string(out)))
	}
	v, ok := javaMajor(string(out))
	if !ok {
		return "", fmt.Errorf("%s -version printed no version I understand (%q): %w", path, firstLine(string(out)), ErrJavaTooOld)
	}
	if v < 17 {
		return "", fmt.Errorf("java at %s is version %d: %w", path, v, ErrJavaTooOld)
	}
	if javaChecked.build == nil {
		javaChecked.build = map[string]string{}
	}
	javaChecked.build[path] = strings.TrimSpace(string(out))
	return path, nil
}

// javaChecked holds, per java path that passed the check, its `-version`
// output: the JDK build, which keys the class-data archives (archive.go).
var javaChecked struct {
	sync.Mutex
	build map[string]string
}

// javaBuild returns the `-version` output of a java that Java checked.
func javaBuild(path string) string {
	javaChecked.Lock()
	defer javaChecked.Unlock()
	return javaChecked.build[path]
}

var javaVersionRE = regexp.MustCompile(`version "([0-9]+)(?:\.([0-9]+))?`)

// javaMajor reads the major version from `java -version` output ("1.8.0_x"
// is 8, "17.0.15" is 17).
func javaMajor(out string) (int, bool) {
	m := javaVersionRE.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, _ := strconv.Atoi(m[1])
	if v == 1 && m[2] != "" {
		v, _ = strconv.Atoi(m[2])
	}
	return v, true
}

// Maven returns the path of mvn on PATH.
func Maven() (string, error) {
	path, err := exec.LookPath("mvn")
	if err != nil {
		return "", ErrNoMaven
	}
	return path, nil
}

// CacheRoot is the directory that holds everything the real tier keeps
// between runs: $MIRRORD_KAFKA_CACHE if set, else $XDG_CACHE_HOME/mirrord,
// else ~/.cache/mirrord. Below it: maven/<key> (resolved jar sets),
// javaclient/<hash> (the built Java client), run/ (pid files of running
// brokers).
func CacheRoot() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set %s): %w", EnvCache, err)
	}
	return filepath.Join(d, "mirrord"), nil
}

const completeMarker = ".complete"

var keyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// Cached returns the directory <CacheRoot>/<kind>/<key>, filling it with fill
// first unless an earlier fill completed. Completion is a marker file written
// after fill returns nil, so an interrupted or failed fill is redone from an
// empty directory. Several processes may call Cached for the same entry at
// once: an exclusive flock on <kind>/<key>.lock lets one fill while the others
// wait (for as long as ctx allows) and then find the marker.
func Cached(ctx context.Context, kind, key string, fill func(ctx context.Context, dir string) error) (string, error) {
	if !keyRE.MatchString(kind) || !keyRE.MatchString(key) {
		return "", fmt.Errorf("cache entry %q/%q: use letters, digits and ._+-", kind, key)
	}
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, kind, key)
	if exists(filepath.Join(dir, completeMarker)) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if exists(filepath.Join(dir, completeMarker)) {
		return dir, nil // another process filled it while we waited
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("cache: clear %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := fill(ctx, dir); err != nil {
		return "", err
	}
	stamp := []byte(time.Now().UTC().Format(time.RFC3339) + "\n")
	if err := os.WriteFile(filepath.Join(dir, completeMarker), stamp, 0o644); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	return dir, nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can end
// the wait.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("cache lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another process to fill %s: %w", strings.TrimSuffix(path, ".lock"), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Artifact is a Maven artifact (a jar).
type Artifact struct {
	Group, Name, Version string
}

func (a Artifact) String() string { return a.Group + ":" + a.Name + ":" + a.Version }

// Spec is a set of artifacts to resolve, with their runtime dependencies,
// into one directory of jars.
type Spec struct {
	// Name starts the cache key (the rest is a hash of the artifacts), so
	// that a directory listing says what each entry is: "kafka-4.4.0".
	Name string
	// Artifacts are resolved with their runtime dependencies
	// (mvn dependency:copy-dependencies -DincludeScope=runtime); Maven
	// picks one version of each dependency (the nearest wins).
	Artifacts []Artifact
	// Extra, if set, sees the file names of the jars the artifacts brought
	// and returns more artifacts to add without their dependencies (they
	// must need nothing the first set lacks). BrokerSpec uses it to add the
	// log4j2 backend and the SLF4J binding that matches the slf4j-api the
	// release brought. Its logic is part of the cache key only through
	// Name: give a different Extra a different Name.
	Extra func(jars []string) ([]Artifact, error)
}

// With returns a copy of s with more artifacts (connect-mirror for
// MirrorMaker 2, say): BrokerSpec(v).With(Artifact{"org.apache.kafka",
// "connect-mirror", v}).
func (s Spec) With(a ...Artifact) Spec {
	s.Artifacts = append(append([]Artifact(nil), s.Artifacts...), a...)
	return s
}

// key is the cache key: Name plus a hash of the artifact set.
func (s Spec) key() string {
	names := make([]string, len(s.Artifacts))
	for i, a := range s.Artifacts {
		names[i] = a.String()
	}
	sort.Strings(names)
	h := sha256.Sum256([]byte("realkafka-maven-v1\n" + s.Name + "\n" + strings.Join(names, "\n")))
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s.Name)
	if name == "" {
		name = "jars"
	}
	return name + "-" + hex.EncodeToString(h[:6])
}

// Jars is a resolved set of jars.
type Jars struct {
	Dir   string   // the directory that holds the jars
	Files []string // their file names, sorted
}

// Classpath is the java -cp argument for every jar of j.
func (j *Jars) Classpath() string { return filepath.Join(j.Dir, "*") }

// Version returns the version of the jar named name (slf4j-api, say) in j,
// or "" if there is none.
func (j *Jars) Version(name string) string { return jarVersion(j.Files, name) }

// BrokerSpec is what a broker of the given Kafka version needs:
// org.apache.kafka:kafka_2.13 with its runtime dependencies, log4j-api and
// log4j-core (if the release does not bring them, at version Log4j) and the
// SLF4J binding that matches the slf4j-api jar the release brought
// (log4j-slf4j-impl for 1.x, log4j-slf4j2-impl for 2.x), of log4j's version.
func BrokerSpec(version string) Spec {
	return Spec{
		Name:      "kafka-" + version,
		Artifacts: []Artifact{{"org.apache.kafka", "kafka_2.13", version}},
		Extra:     log4jBackend,
	}
}

// log4jBackend is BrokerSpec's Extra.
func log4jBackend(jars []string) ([]Artifact, error) {
	const g = "org.apache.logging.log4j"
	slf4j := jarVersion(jars, "slf4j-api")
	if slf4j == "" {
		return nil, errors.New("the resolved jars hold no slf4j-api: cannot pick an SLF4J binding")
	}
	var add []Artifact
	v := jarVersion(jars, "log4j-api")
	if v == "" {
		v = Log4j
		add = append(add, Artifact{g, "log4j-api", v})
	}
	if jarVersion(jars, "log4j-core") == "" {
		add = append(add, Artifact{g, "log4j-core", v})
	}
	binding := "log4j-slf4j2-impl"
	if strings.HasPrefix(slf4j, "1.") {
		binding = "log4j-slf4j-impl"
	}
	if jarVersion(jars, binding) == "" {
		add = append(add, Artifact{g, binding, v})
	}
	return add, nil
}

// jarVersion finds name-<version>.jar among files.
func jarVersion(files []string, name string) string {
	for _, f := range files {
		rest, ok := strings.CutPrefix(f, name+"-")
		if !ok || !strings.HasSuffix(rest, ".jar") || rest == "" || rest[0] < '0' || rest[0] > '9' {
			continue
		}
		return strings.TrimSuffix(rest, ".jar")
	}
	return ""
}

// Resolve resolves spec into the cache (CacheRoot()/maven/<key>/libs), once:
// a later call for the same spec, in this process or another, finds the
// completed directory and runs no Maven at all.
func Resolve(ctx context.Context, spec Spec) (*Jars, error) {
	if len(spec.Artifacts) == 0 {
		return nil, errors.New("resolve: no artifacts")
	}
	for _, a := range spec.Artifacts {
		if a.Group == "" || a.Name == "" || a.Version == "" {
			return nil, fmt.Errorf("resolve: artifact %q needs a group, a name and a version", a.String())
		}
	}
	dir, err := Cached(ctx, "maven", spec.key(), func(ctx context.Context, dir string) error {
		return resolveInto(ctx, dir, spec)
	})
	if err != nil {
		return nil, err
	}
	libs := filepath.Join(dir, "libs")
	files, err := jarFiles(libs)
	if err != nil {
		return nil, err
	}
	return &Jars{Dir: libs, Files: files}, nil
}

func resolveInto(ctx context.Context, dir string, spec Spec) error {
	libs := filepath.Join(dir, "libs")
	log := filepath.Join(dir, "resolve.log")
	if err := writePom(filepath.Join(dir, "pom.xml"), spec.Artifacts); err != nil {
		return err
	}
	args := []string{"-B", "-q", "-f", "pom.xml", "dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory=" + libs}
	if err := RunMaven(ctx, dir, log, args...); err != nil {
		return resolveError(err, log, spec.Artifacts)
	}
	if spec.Extra == nil {
		return nil
	}
	files, err := jarFiles(libs)
	if err != nil {
		return err
	}
	extra, err := spec.Extra(files)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", spec.Name, err)
	}
	if len(extra) == 0 {
		return nil
	}
	if err := writePom(filepath.Join(dir, "pom-extra.xml"), extra); err != nil {
		return err
	}
	args = []string{"-B", "-q", "-f", "pom-extra.xml", "dependency:copy-dependencies", "-DincludeScope=runtime", "-DexcludeTransitive=true", "-DoutputDirectory=" + libs}
	if err := RunMaven(ctx, dir, log, args...); err != nil {
		return resolveError(err, log, extra)
	}
	return nil
}

func jarFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("resolved jars: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".jar") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func writePom(path string, arts []Artifact) error {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by mirrord's realkafka test kit to resolve jars; throwaway. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>mirrord.realkafka</groupId>
  <artifactId>resolve</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
`)
	for _, a := range arts {
		fmt.Fprintf(&b, "    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n",
			xmlEscape(a.Group), xmlEscape(a.Name), xmlEscape(a.Version))
	}
	b.WriteString("  </dependencies>\n</project>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	return nil
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// MavenError is a Maven run that failed: what to tell the user is Error(),
// one line; Log holds the full output.
type MavenError struct {
	What     string // what Maven was asked for ("resolve org.apache.kafka:kafka_2.13:4.4.0")
	FirstErr string // Maven's first [ERROR] line, without the prefix
	Log      string // the file with the full output
	Err      error  // the process error
}

func (e *MavenError) Error() string {
	msg := e.FirstErr
	if msg == "" {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("maven could not %s: %s (full output in %s)", e.What, msg, e.Log)
}

func (e *MavenError) Unwrap() error { return e.Err }

// RunMaven runs mvn with args in dir, appending its output to logPath. A
// failure is a *MavenError whose What is "run mvn <args>" (callers that know
// better replace it).
func RunMaven(ctx context.Context, dir, logPath string, args ...string) error {
	mvn, err := Maven()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("maven log: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "$ mvn %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, mvn, args...)
	cmd.Dir = dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	mvnRuns.Add(1)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return &MavenError{What: "run mvn " + strings.Join(args, " "), FirstErr: firstMavenError(logPath), Log: logPath, Err: err}
	}
	return nil
}

// resolveError names, in a failed resolution, the artifact Maven could not
// resolve: the first of arts whose group:name appears in an [ERROR] line,
// or all of them.
func resolveError(err error, log string, arts []Artifact) error {
	var me *MavenError
	if !errors.As(err, &me) {
		return err
	}
	errs := mavenErrorLines(log)
	what := ""
	for _, a := range arts {
		for _, l := range errs {
			if strings.Contains(l, a.Group+":"+a.Name) {
				what = a.String()
				break
			}
		}
		if what != "" {
			break
		}
	}
	if what == "" {
		names := make([]string, len(arts))
		for i, a := range arts {
			names[i] = a.String()
		}
		what = strings.Join(names, ", ")
	}
	me.What = "resolve " + what
	return me
}

func firstMavenError(log string) string {
	lines := mavenErrorLines(log)
	if len(lines) == 0 {
		return ""
	}
	return lines[0]
}

// mavenErrorLines returns the non-empty [ERROR] lines of a Maven log.
func mavenErrorLines(log string) []string {
	f, err := os.Open(log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := stripANSI(sc.Text())
		if rest, ok := strings.CutPrefix(l, "[ERROR]"); ok {
			if rest = strings.TrimSpace(rest); rest != "" {
				out = append(out, rest)
			}
		}
	}
	return out
}

var ansiRE = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func stripANSI(s string) string { return ansiRE.ReplaceAllString(s, "") }

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
