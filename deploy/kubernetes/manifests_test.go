// Package kubernetes holds mirrord's Kubernetes manifests (the YAML files
// beside this one, applied with kubectl apply -k) and the test that checks
// them. It is a Go module of its own so that the Kubernetes API types the
// test decodes into stay out of the agent's go.mod.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded manifests of the directory, one of each kind.
type manifests struct {
	configMap *corev1.ConfigMap
	sts       *appsv1.StatefulSet
	svc       *corev1.Service
	pdb       *policyv1.PodDisruptionBudget
	sm        *monitoringv1.ServiceMonitor
}

// kustomization is the part of kustomize's Kustomization this directory
// uses; anything else in the file fails the strict decoding.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// load decodes every manifest of the directory strictly (a field the
// Kubernetes API type does not have fails, as kubectl's server-side field
// validation would) into the type its kind names; a kind the directory is
// not meant to hold, a second manifest of one kind, or a file kustomization
// does not list fails too.
func load(t *testing.T) manifests {
	t.Helper()
	var k kustomization
	decodeFile(t, "kustomization.yaml", &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: apiVersion %q kind %q", k.APIVersion, k.Kind)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(files, listed) {
		t.Fatalf("kustomization.yaml lists %v, the directory holds %v: each manifest is applied only if listed", listed, files)
	}
	var m manifests
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := bytes.Split(raw, []byte("\n---\n"))
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want one manifest per file", f, len(docs))
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var into any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			into = set(t, f, &m.configMap)
		case "apps/v1 StatefulSet":
			into = set(t, f, &m.sts)
		case "v1 Service":
			into = set(t, f, &m.svc)
		case "policy/v1 PodDisruptionBudget":
			into = set(t, f, &m.pdb)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			into = set(t, f, &m.sm)
		default:
			t.Fatalf("%s: apiVersion %q kind %q is not one this directory holds", f, head.APIVersion, head.Kind)
		}
		decodeFile(t, f, into)
	}
	if m.configMap == nil || m.sts == nil || m.svc == nil || m.pdb == nil || m.sm == nil {
		t.Fatalf("missing a manifest: %+v", m)
	}
	return m
}

// set allocates *p for the manifest in file f; a second one fails.
func set[T any](t *testing.T, f string, p **T) *T {
	t.Helper()
	if *p != nil {
		t.Fatalf("%s: a second %T", f, *p)
	}
	*p = new(T)
	return *p
}

func decodeFile(t *testing.T, f string, into any) {
	t.Helper()
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
}

// matches reports whether selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The manifests decode strictly into the Kubernetes API types, and they fit
// together: the selectors select the pods, the ServiceMonitor the Service
// and its port, the probes and the port are the agent's listener, and the
// container runs the configuration the ConfigMap mounts.
func TestManifests(t *testing.T) {
	m := load(t)
	pod := m.sts.Spec.Template
	if m.sts.Spec.Selector == nil || !matches(m.sts.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods %v", m.sts.Spec.Selector, pod.Labels)
	}
	hcl := m.configMap.Data["config.hcl"]
	if r := m.sts.Spec.Replicas; r == nil || *r != 3 {
		t.Errorf("StatefulSet replicas %v: want three agents", r)
	}
	if s := regexp.MustCompile(`(?m)^\s*slots\s*=\s*(\d+)`).FindStringSubmatch(hcl); s == nil || s[1] != "6" {
		t.Errorf("config.hcl's link: slots %v, want 6 (two slots per agent of three)", s)
	}
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 || m.pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v: a drain stops one agent at a time", mu, m.pdb.Spec.MinAvailable)
	}
	if m.sts.Spec.ServiceName != m.svc.Name {
		t.Errorf("StatefulSet serviceName %q, the Service is %q", m.sts.Spec.ServiceName, m.svc.Name)
	}
	if !matches(m.svc.Spec.Selector, pod.Labels) {
		t.Errorf("the Service's selector %v does not select the pods %v", m.svc.Spec.Selector, pod.Labels)
	}
	if m.pdb.Spec.Selector == nil || !matches(m.pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the pods %v", m.pdb.Spec.Selector, pod.Labels)
	}
	if !matches(m.sm.Spec.Selector.MatchLabels, m.svc.Labels) {
		t.Errorf("the ServiceMonitor's selector %v does not select the Service %v", m.sm.Spec.Selector.MatchLabels, m.svc.Labels)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want mirrord's", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	listen := regexp.MustCompile(`(?m)^\s*listen\s*=\s*"([^"]*)"`).FindStringSubmatch(hcl)
	if listen == nil {
		t.Fatal("config.hcl sets no agent.listen: the default, 127.0.0.1:9644, is unreachable from the kubelet and Prometheus")
	}
	_, port, _ := strings.Cut(listen[1], ":")
	var http *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "http" {
			http = &c.Ports[i]
		}
	}
	if http == nil || fmt.Sprint(http.ContainerPort) != port {
		t.Fatalf("container port http %+v, the agent listens on %s", http, listen[1])
	}
	if !slices.ContainsFunc(m.svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" && p.TargetPort.String() == "http" }) {
		t.Errorf("the Service has no port http to the container's port http: %+v", m.svc.Spec.Ports)
	}
	if len(m.sm.Spec.Endpoints) != 1 || m.sm.Spec.Endpoints[0].Port != "http" || m.sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want /metrics on the Service's port http", m.sm.Spec.Endpoints)
	}
	// Every probe asks /healthz: /readyz fails while an agent has not
	// joined the slots group or a slot it owns is not MIRRORING, and a
	// rolling update would wait for it.
	for name, probe := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET /healthz on port http", name, probe)
		}
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}

	// The agent's stop (shutdown_timeout) fits in the grace period.
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || !strings.Contains(hcl, `shutdown_timeout = "30s"`) || *g < 40 {
		t.Errorf("terminationGracePeriodSeconds %v with config.hcl's shutdown_timeout: the final checkpoints must fit in the grace period", g)
	}

	// The container runs the mounted configuration, and every file the
	// configuration names is in a mounted volume.
	files := mountedFiles(t, m, c)
	if i := slices.Index(c.Args, "--config"); i < 0 || i+1 >= len(c.Args) || files[c.Args[i+1]] != "configmap "+m.configMap.Name+" key config.hcl" {
		t.Errorf("container args %v: want run --config on the ConfigMap's config.hcl (mounted: %v)", c.Args, files)
	}
	for _, p := range regexp.MustCompile(`"(/etc/mirrord/[^"]+)"`).FindAllStringSubmatch(hcl, -1) {
		if _, ok := files[p[1]]; !ok {
			t.Errorf("config.hcl names %s, which no volume of the pod mounts (mounted: %v)", p[1], files)
		}
	}
}

// mountedFiles maps each file the container's volume mounts provide (the
// mount path joined with the item's path) to where it comes from.
func mountedFiles(t *testing.T, m manifests, c corev1.Container) map[string]string {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range m.sts.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			t.Errorf("volume mount %s names no volume", vm.Name)
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("volume mount %s is writable", vm.Name)
		}
		switch {
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != m.configMap.Name {
				t.Errorf("volume %s mounts ConfigMap %q, the directory's is %q", v.Name, v.ConfigMap.Name, m.configMap.Name)
			}
			for key := range m.configMap.Data {
				out[path.Join(vm.MountPath, key)] = "configmap " + v.ConfigMap.Name + " key " + key
			}
		case v.Secret != nil:
			if len(v.Secret.Items) == 0 {
				t.Errorf("volume %s mounts every key of secret %s: name the keys, so that a missing one fails the pod's start instead of mirrord's", v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				out[path.Join(vm.MountPath, it.Path)] = "secret " + v.Secret.SecretName + " key " + it.Key
			}
		default:
			t.Errorf("volume %s is neither a ConfigMap nor a Secret", v.Name)
		}
	}
	return out
}

// The ConfigMap's configuration is one mirrord accepts: mirrord validate
// (the agent's own check, run from the repository) with every mounted file
// in place under a temporary root.
func TestConfigValidates(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	m := load(t)
	root := t.TempDir()
	for f, from := range mountedFiles(t, m, m.sts.Spec.Template.Spec.Containers[0]) {
		dst := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		// A secret's stand-in: long enough for an admin token.
		content := "stand-in-" + strings.NewReplacer(" ", "-", "/", "-").Replace(from) + "-0123456789abcdef\n"
		if strings.HasSuffix(f, "config.hcl") {
			content = strings.ReplaceAll(m.configMap.Data["config.hcl"], `"/etc/mirrord/`, `"`+filepath.ToSlash(root)+`/etc/mirrord/`)
		}
		if err := os.WriteFile(dst, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(root, "etc", "mirrord", "config", "config.hcl")
	cmd := exec.Command("go", "run", "./cmd/mirrord", "validate", "--config", cfg)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mirrord validate of configmap.yaml's config.hcl: %v\n%s", err, out)
	}
	t.Logf("mirrord validate:\n%s", out)
}
