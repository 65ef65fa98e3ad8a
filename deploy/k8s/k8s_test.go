// Package k8s_test checks the Kubernetes manifests of this folder: every document decodes
// strictly into the Kubernetes API types, and the objects agree with one another (selectors,
// ports, volumes, keys) and with what stockpot serve and route expect. The flags themselves
// are checked against the real flag sets in cmd/stockpot (deploy_test.go there).
package k8s_test

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"stockpot/internal/bytesize"
	"stockpot/internal/server"
)

// objects are the decoded manifests, by kind.
type objects struct {
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	secrets      []*corev1.Secret
	claims       []*corev1.PersistentVolumeClaim
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
}

func (o *objects) secret(name string) *corev1.Secret {
	for _, s := range o.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// splitDocs splits a YAML stream at its "---" lines, dropping documents with nothing but
// comments.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		has := false
		for _, l := range strings.Split(string(d), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				has = true
			}
		}
		if has {
			out = append(out, d)
		}
	}
	return out
}

func load(t *testing.T) *objects { t.Helper(); return loadGlobs(t, "*.yaml") }

// loadGlobs decodes the manifests the patterns match (pd_test.go adds pd/*.yaml).
func loadGlobs(t *testing.T, patterns ...string) *objects {
	t.Helper()
	var files []string
	for _, p := range patterns {
		m, err := filepath.Glob(p)
		if err != nil || len(m) == 0 {
			t.Fatalf("no manifests %s: %v", p, err)
		}
		files = append(files, m...)
	}
	o := &objects{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(b) {
			where := fmt.Sprintf("%s document %d", f, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			var wantVersion string
			switch tm.Kind {
			case "StatefulSet":
				v := &appsv1.StatefulSet{}
				obj, wantVersion, o.statefulSets = v, "apps/v1", append(o.statefulSets, v)
			case "Deployment":
				v := &appsv1.Deployment{}
				obj, wantVersion, o.deployments = v, "apps/v1", append(o.deployments, v)
			case "Service":
				v := &corev1.Service{}
				obj, wantVersion, o.services = v, "v1", append(o.services, v)
			case "Secret":
				v := &corev1.Secret{}
				obj, wantVersion, o.secrets = v, "v1", append(o.secrets, v)
			case "PersistentVolumeClaim":
				v := &corev1.PersistentVolumeClaim{}
				obj, wantVersion, o.claims = v, "v1", append(o.claims, v)
			case "PodDisruptionBudget":
				v := &policyv1.PodDisruptionBudget{}
				obj, wantVersion, o.pdbs = v, "policy/v1", append(o.pdbs, v)
			case "NetworkPolicy":
				v := &networkingv1.NetworkPolicy{}
				obj, wantVersion, o.netpols = v, "networking.k8s.io/v1", append(o.netpols, v)
			default:
				t.Fatalf("%s: kind %q has no check here; add it to the test", where, tm.Kind)
			}
			if tm.APIVersion != wantVersion {
				t.Errorf("%s: %s is apiVersion %q, want %q", where, tm.Kind, tm.APIVersion, wantVersion)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s (%s): %v", where, tm.Kind, err)
			}
		}
	}
	return o
}

// workload is a StatefulSet or a Deployment, seen through what the checks need.
type workload struct {
	kind, name string
	replicas   int32
	selector   *metav1.LabelSelector
	pod        corev1.PodTemplateSpec
}

func (o *objects) workloads() []workload {
	var out []workload
	for _, s := range o.statefulSets {
		out = append(out, workload{"StatefulSet", s.Name, *s.Spec.Replicas, s.Spec.Selector, s.Spec.Template})
	}
	for _, d := range o.deployments {
		out = append(out, workload{"Deployment", d.Name, *d.Spec.Replicas, d.Spec.Selector, d.Spec.Template})
	}
	return out
}

func (o *objects) statefulSet(t *testing.T, name string) *appsv1.StatefulSet {
	for _, s := range o.statefulSets {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no StatefulSet %q", name)
	return nil
}

func (o *objects) service(name string) *corev1.Service {
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// stockpot returns the pod's stockpot container, its subcommand and its flags
// (--name=value); nil for a pod without one.
func stockpot(t *testing.T, pod corev1.PodSpec) (*corev1.Container, string, map[string][]string) {
	t.Helper()
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if !slices.Equal(c.Command, []string{"stockpot"}) {
			continue
		}
		if len(c.Args) == 0 {
			t.Fatalf("container %s runs stockpot without a subcommand", c.Name)
		}
		flags := map[string][]string{}
		for _, a := range c.Args[1:] {
			name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !ok {
				t.Fatalf("container %s: argument %q is not --name=value", c.Name, a)
			}
			flags[name] = append(flags[name], value)
		}
		return c, c.Args[0], flags
	}
	return nil, "", nil
}

func port(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func TestManifestsDecodeStrictly(t *testing.T) {
	o := load(t)
	if len(o.statefulSets) != 3 || len(o.deployments) != 1 || len(o.pdbs) < 2 || len(o.secrets) != 2 || len(o.netpols) != 1 {
		t.Fatalf("objects: %d StatefulSets, %d Deployments, %d PDBs, %d Secrets, %d NetworkPolicies; want serve, redis and its replica, the router, a PDB each for serve and router, the keys' and Redis TLS's Secrets, Redis's NetworkPolicy",
			len(o.statefulSets), len(o.deployments), len(o.pdbs), len(o.secrets), len(o.netpols))
	}
	// Strictness itself: an unknown field and a misspelt one are refused.
	for bad, into := range map[string]any{
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIP: None, bogus: 1}\n": &corev1.Service{},
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n":        &appsv1.Deployment{},
		"apiVersion: v1\nkind: Service\nmetadata: {name: x, name: y}\n":                           &corev1.Service{},
	} {
		if err := yaml.UnmarshalStrict([]byte(bad), into); err == nil {
			t.Errorf("strict decoding accepted %q", bad)
		}
	}
}

// Every workload: its selector matches its pods; stockpot pods have probes on /health on
// their http port and Prometheus scrape annotations naming that port.
func TestProbesAndScrapeAnnotations(t *testing.T) {
	o := load(t)
	for _, w := range o.workloads() {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s %s: selector %v does not match its pod labels %v (%v)", w.kind, w.name, w.selector, w.pod.Labels, err)
		}
		c, sub, _ := stockpot(t, w.pod.Spec)
		if c == nil {
			for _, c := range w.pod.Spec.Containers {
				if c.ReadinessProbe == nil || c.LivenessProbe == nil {
					t.Errorf("%s %s: container %s lacks a readiness or liveness probe", w.kind, w.name, c.Name)
				}
			}
			continue
		}
		http := port(t, c, "http")
		health := func(what string, p *corev1.Probe) {
			t.Helper()
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("%s %s: %s probe %+v, want GET /health on port http", w.kind, w.name, what, p)
			}
		}
		health("readiness", c.ReadinessProbe)
		switch sub {
		case "serve":
			health("liveness", c.LivenessProbe)
			health("startup", c.StartupProbe)
		case "route": // /health is 503 with no healthy replica: liveness is a TCP check
			if p := c.LivenessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port.String() != "http" {
				t.Errorf("%s %s: liveness probe %+v, want a TCP check of port http", w.kind, w.name, p)
			}
		default:
			t.Errorf("%s %s: stockpot %s is neither serve nor route", w.kind, w.name, sub)
		}
		a := w.pod.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != strconv.Itoa(int(http)) {
			t.Errorf("%s %s: scrape annotations %v, want scrape true, path /metrics, port %d", w.kind, w.name, a, http)
		}
	}
}

// Each Service selects the pods of exactly one workload and targets a port they have; the
// StatefulSets' serviceName is a Service selecting their pods, headless for the replicas.
func TestServices(t *testing.T) {
	o := load(t)
	for _, s := range o.services {
		var matched []workload
		for _, w := range o.workloads() {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(s.Spec.Selector) == 0 || len(matched) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", s.Name, len(matched))
			continue
		}
		for _, p := range s.Spec.Ports {
			found := false
			for _, c := range matched[0].pod.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == p.TargetPort.String()
				}
			}
			if !found {
				t.Errorf("Service %s: targetPort %s is no port of %s", s.Name, p.TargetPort.String(), matched[0].name)
			}
		}
	}
	for _, st := range o.statefulSets {
		s := o.service(st.Spec.ServiceName)
		if s == nil || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(st.Spec.Template.Labels)) {
			t.Errorf("StatefulSet %s: serviceName %q is no Service selecting its pods", st.Name, st.Spec.ServiceName)
		}
	}
	if s := o.service(o.statefulSet(t, "stockpot-serve").Spec.ServiceName); s.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("the replicas' Service %s is not headless: no DNS name per replica", s.Name)
	}
}

// Each PodDisruptionBudget selects the pods of one workload and lets at least one pod go,
// and serve and route both have one.
func TestDisruptionBudgets(t *testing.T) {
	o := load(t)
	covered := map[string]bool{}
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PDB %s: selector %v (%v)", p.Name, p.Spec.Selector, err)
			continue
		}
		var matched []workload
		for _, w := range o.workloads() {
			if sel.Matches(labels.Set(w.pod.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("PDB %s selects %d workloads, want 1", p.Name, len(matched))
			continue
		}
		w := matched[0]
		covered[w.name] = true
		switch {
		case p.Spec.MaxUnavailable != nil:
			if n := p.Spec.MaxUnavailable.IntValue(); n < 1 || n >= int(w.replicas) {
				t.Errorf("PDB %s: maxUnavailable %d of %d replicas", p.Name, n, w.replicas)
			}
		case p.Spec.MinAvailable != nil:
			if n := p.Spec.MinAvailable.IntValue(); n < 1 || n >= int(w.replicas) {
				t.Errorf("PDB %s: minAvailable %d of %d replicas: a drain could never evict one, or nothing is kept", p.Name, n, w.replicas)
			}
		default:
			t.Errorf("PDB %s sets neither maxUnavailable nor minAvailable", p.Name)
		}
	}
	for _, name := range []string{"stockpot-serve", "stockpot-router"} {
		if !covered[name] {
			t.Errorf("%s has no PodDisruptionBudget", name)
		}
	}
}

// The router's --backend list is exactly the replicas' stable DNS names and port, one per
// StatefulSet replica.
func TestRouterBackendsMatchReplicas(t *testing.T) {
	o := load(t)
	st := o.statefulSet(t, "stockpot-serve")
	serveC, _, _ := stockpot(t, st.Spec.Template.Spec)
	svc := o.service(st.Spec.ServiceName)
	var want []string
	for i := range *st.Spec.Replicas {
		want = append(want, fmt.Sprintf("http://%s-%d.%s:%d", st.Name, i, svc.Name, port(t, serveC, "http")))
	}
	if len(o.deployments) != 1 {
		t.Fatalf("%d Deployments, want the router", len(o.deployments))
	}
	c, sub, flags := stockpot(t, o.deployments[0].Spec.Template.Spec)
	if c == nil || sub != "route" {
		t.Fatalf("the Deployment runs %q, want stockpot route", sub)
	}
	if !slices.Equal(flags["backend"], want) {
		t.Fatalf("router --backend %q, want %q (one per replica of %s)", flags["backend"], want, st.Name)
	}
	for _, b := range flags["backend"] {
		u, err := url.Parse(b)
		if err != nil || u.Port() != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
			t.Errorf("backend %s: port is not the Service's %d (%v)", b, svc.Spec.Ports[0].Port, err)
		}
	}
}

// Files and volumes: every --*-file flag reads a key of the mounted Secret; the disk tier
// lives on the replica's claim, under its size; the remote tier names the Redis Service; every
// mount has a volume; every claim referenced exists.
func TestVolumesKeysAndTiers(t *testing.T) {
	o := load(t)
	for _, w := range o.workloads() {
		c, _, flags := stockpot(t, w.pod.Spec)
		if c == nil {
			continue
		}
		vols := map[string]corev1.Volume{}
		for _, v := range w.pod.Spec.Volumes {
			vols[v.Name] = v
		}
		claims := map[string]corev1.PersistentVolumeClaim{}
		if w.kind == "StatefulSet" {
			for _, ct := range o.statefulSet(t, w.name).Spec.VolumeClaimTemplates {
				claims[ct.Name] = ct
			}
		}
		mountAt := map[string]string{} // mount path → volume
		for _, m := range c.VolumeMounts {
			_, isVol := vols[m.Name]
			_, isClaim := claims[m.Name]
			if !isVol && !isClaim {
				t.Errorf("%s: mount %s has no volume", w.name, m.Name)
			}
			mountAt[m.MountPath] = m.Name
		}
		for _, v := range vols {
			if pvc := v.PersistentVolumeClaim; pvc != nil && !slices.ContainsFunc(o.claims, func(c *corev1.PersistentVolumeClaim) bool { return c.Name == pvc.ClaimName }) {
				t.Errorf("%s: volume %s uses claim %s, which no manifest makes", w.name, v.Name, pvc.ClaimName)
			}
		}
		for name, values := range flags {
			if !strings.HasSuffix(name, "-file") {
				continue
			}
			for _, path := range values {
				dir, key := filepath.Dir(path), filepath.Base(path)
				v, ok := vols[mountAt[dir]]
				if !ok || v.Secret == nil || o.secret(v.Secret.SecretName) == nil {
					t.Errorf("%s --%s=%s: %s is not a mount of a Secret of the manifests", w.name, name, path, dir)
					continue
				}
				secret := o.secret(v.Secret.SecretName)
				file := key
				if len(v.Secret.Items) > 0 {
					file = ""
					for _, it := range v.Secret.Items {
						if it.Path == key {
							file = it.Key
						}
					}
				}
				if _, ok := secret.StringData[file]; !ok {
					t.Errorf("%s --%s=%s: Secret %s has no key %q", w.name, name, path, secret.Name, file)
				}
			}
		}
		if dirs := flags["disk-cache"]; len(dirs) > 0 {
			claim, ok := claims[mountAt[dirs[0]]]
			if !ok {
				t.Errorf("%s: --disk-cache=%s is not on a volumeClaimTemplate (a replica's own volume)", w.name, dirs[0])
				continue
			}
			size, err := bytesize.Parse(flags["disk-cache-size"][0])
			if err != nil {
				t.Fatalf("--disk-cache-size: %v", err)
			}
			req := claim.Spec.Resources.Requests[corev1.ResourceStorage]
			if size <= 0 || size > req.Value() {
				t.Errorf("%s: --disk-cache-size %d bytes, the claim requests %s", w.name, size, req.String())
			}
		}
		if mem, ok := flags["host-cache"]; ok {
			host, err := bytesize.Parse(mem[0])
			if err != nil {
				t.Fatalf("--host-cache: %v", err)
			}
			limit := c.Resources.Limits[corev1.ResourceMemory]
			if host >= limit.Value() {
				t.Errorf("%s: --host-cache %s does not fit the memory limit %s", w.name, mem[0], limit.String())
			}
		}
		if threads, ok := flags["threads"]; ok {
			cpu := c.Resources.Requests[corev1.ResourceCPU]
			if n, err := strconv.Atoi(threads[0]); err != nil || resource.NewQuantity(int64(n), resource.DecimalSI).Cmp(cpu) != 0 {
				t.Errorf("%s: --threads=%s, the CPU request is %s", w.name, threads[0], cpu.String())
			}
		}
		for _, remote := range flags["remote-cache"] {
			u, err := url.Parse(remote)
			if err != nil {
				t.Fatalf("--remote-cache %s: %v", remote, err)
			}
			s := o.service(u.Hostname())
			if s == nil || strconv.Itoa(int(s.Spec.Ports[0].Port)) != u.Port() {
				t.Errorf("%s: --remote-cache %s names no Service port of the manifests", w.name, remote)
			}
		}
	}
}

// Graceful termination: a replica's grace period covers the server's drain and leaves time
// for the write-back of its working pool; the router's covers its preStop and its drain.
func TestGracefulTermination(t *testing.T) {
	o := load(t)
	const writeBack = 60 * time.Second
	drain := server.DefaultConfig().DrainTimeout
	serve := o.statefulSet(t, "stockpot-serve").Spec.Template.Spec
	if g := time.Duration(*serve.TerminationGracePeriodSeconds) * time.Second; g < drain+writeBack {
		t.Errorf("replicas: terminationGracePeriodSeconds %v < drain %v + write-back %v", g, drain, writeBack)
	}
	rt := o.deployments[0].Spec.Template.Spec
	c, _, _ := stockpot(t, rt)
	pre := time.Duration(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pre = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	const routerDrain = 30 * time.Second // cmd/stockpot route's Shutdown timeout
	if g := time.Duration(*rt.TerminationGracePeriodSeconds) * time.Second; pre == 0 || g < pre+routerDrain {
		t.Errorf("router: grace %v, preStop sleep %v; want a preStop and grace >= preStop + %v", g, pre, routerDrain)
	}
}

// args returns a container's arguments as name → values, for "--name value" pairs.
func args(c corev1.Container) map[string][]string {
	out := map[string][]string{}
	for i := 0; i+1 < len(c.Args); i++ {
		if name, ok := strings.CutPrefix(c.Args[i], "--"); ok {
			out[name] = append(out[name], c.Args[i+1])
			i++
		}
	}
	return out
}

// Redis is locked down: TLS only (port 0, tls-port its container port, certificate files from
// a mounted Secret that holds them), requirepass from a Secret key the replicas read as their
// password file; the replicas reach it over rediss://, checked against that Secret's CA, and
// sign their records (--tier-key-file); a NetworkPolicy selects the Redis pods and admits only
// the replicas, on the Redis port.
func TestRedisAuthTLSAndNetworkPolicy(t *testing.T) {
	o := load(t)
	rs := o.statefulSet(t, "stockpot-redis")
	rpod := rs.Spec.Template
	rc := rpod.Spec.Containers[0]
	ra := args(rc)
	tlsPort := port(t, &rc, "redis")
	if ra["port"][0] != "0" || ra["tls-port"][0] != strconv.Itoa(int(tlsPort)) || ra["tls-auth-clients"][0] != "no" {
		t.Errorf("redis: --port %q --tls-port %q, want 0 and its container port %d (TLS only)", ra["port"], ra["tls-port"], tlsPort)
	}
	mounts := map[string]string{}
	for _, m := range rc.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	var tlsSecret *corev1.Secret
	for _, flag := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file"} {
		path := ra[flag][0]
		var vol *corev1.Volume
		for i, v := range rpod.Spec.Volumes {
			if v.Name == mounts[filepath.Dir(path)] {
				vol = &rpod.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil || o.secret(vol.Secret.SecretName) == nil {
			t.Fatalf("redis --%s %s: not on a mounted Secret of the manifests", flag, path)
		}
		tlsSecret = o.secret(vol.Secret.SecretName)
		if _, ok := tlsSecret.StringData[filepath.Base(path)]; !ok {
			t.Errorf("redis --%s %s: Secret %s has no key %s", flag, path, tlsSecret.Name, filepath.Base(path))
		}
	}
	var pwRef *corev1.SecretKeySelector
	for _, e := range rc.Env {
		if ra["requirepass"][0] == "$("+e.Name+")" && e.ValueFrom != nil {
			pwRef = e.ValueFrom.SecretKeyRef
		}
	}
	if pwRef == nil || o.secret(pwRef.Name) == nil || o.secret(pwRef.Name).StringData[pwRef.Key] == "" {
		t.Fatalf("redis --requirepass %q: not an environment variable from a Secret key of the manifests", ra["requirepass"])
	}

	st := o.statefulSet(t, "stockpot-serve")
	_, _, flags := stockpot(t, st.Spec.Template.Spec)
	u, err := url.Parse(flags["remote-cache"][0])
	if err != nil || u.Scheme != "rediss" || u.User != nil {
		t.Errorf("serve --remote-cache %s: want rediss:// and no password in the URL", flags["remote-cache"][0])
	}
	secretKey := func(flag string) (string, string) { // the Secret and key a --flag file reads
		path := flags[flag][0]
		for _, m := range st.Spec.Template.Spec.Containers[0].VolumeMounts {
			if m.MountPath != filepath.Dir(path) {
				continue
			}
			for _, v := range st.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					for _, it := range v.Secret.Items {
						if it.Path == filepath.Base(path) {
							return v.Secret.SecretName, it.Key
						}
					}
					return v.Secret.SecretName, filepath.Base(path)
				}
			}
		}
		t.Fatalf("serve --%s %s: not a Secret mount", flag, path)
		return "", ""
	}
	if s, k := secretKey("remote-cache-password-file"); s != pwRef.Name || k != pwRef.Key {
		t.Errorf("serve's Redis password is %s/%s, Redis's requirepass %s/%s", s, k, pwRef.Name, pwRef.Key)
	}
	if s, k := secretKey("remote-cache-ca-file"); s != tlsSecret.Name || k != filepath.Base(ra["tls-ca-cert-file"][0]) {
		t.Errorf("serve checks Redis against %s/%s, Redis's CA is %s/%s", s, k, tlsSecret.Name, filepath.Base(ra["tls-ca-cert-file"][0]))
	}
	if len(flags["tier-key-file"]) == 0 {
		t.Error("serve has a remote tier but no --tier-key-file: its records are not authenticated")
	}

	np := o.netpols[0]
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() {
		t.Fatalf("NetworkPolicy %s: selector %v (%v)", np.Name, np.Spec.PodSelector, err)
	}
	isRedis := func(name string) bool { return name == rs.Name || name == "stockpot-redis-replica" }
	for _, w := range o.workloads() {
		if sel.Matches(labels.Set(w.pod.Labels)) != isRedis(w.name) {
			t.Errorf("NetworkPolicy %s: selects %s %v, want only the Redis pods (primary and replica)", np.Name, w.name, sel.Matches(labels.Set(w.pod.Labels)))
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 1 {
		t.Fatalf("NetworkPolicy %s: policyTypes %v, %d ingress rules; want Ingress and one rule", np.Name, np.Spec.PolicyTypes, len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port.IntValue() != int(tlsPort) {
		t.Errorf("NetworkPolicy %s: ports %v, want only %d", np.Name, rule.Ports, tlsPort)
	}
	var from []labels.Selector
	for _, peer := range rule.From {
		if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
			t.Fatalf("NetworkPolicy %s: from %v, want pod selectors of this namespace", np.Name, rule.From)
		}
		sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil || sel.Empty() {
			t.Fatalf("NetworkPolicy %s: from selector %v (%v)", np.Name, peer.PodSelector, err)
		}
		from = append(from, sel)
	}
	for _, w := range o.workloads() {
		_, _, f := stockpot(t, w.pod.Spec)
		admitted := slices.ContainsFunc(from, func(s labels.Selector) bool { return s.Matches(labels.Set(w.pod.Labels)) })
		if want := len(f["remote-cache"]) > 0 || isRedis(w.name); admitted != want {
			t.Errorf("NetworkPolicy %s: admits %s %v, want exactly the pods with --remote-cache and the Redis pods (replication)", np.Name, w.name, admitted)
		}
	}
}

// The replica (redis-replica.yaml) runs as the primary does (TLS only, the same password,
// certificate and memory policy: once promoted it serves as the primary did) and follows the
// Service that serve's --remote-cache names, over TLS, with that password; no workload but
// Redis's own selects its pods through Service stockpot-redis.
func TestRedisReplica(t *testing.T) {
	o := load(t)
	primary, replica := o.statefulSet(t, "stockpot-redis"), o.statefulSet(t, "stockpot-redis-replica")
	pa, ra := args(primary.Spec.Template.Spec.Containers[0]), args(replica.Spec.Template.Spec.Containers[0])
	for flag, v := range pa {
		if !slices.Equal(ra[flag], v) && flag != "replicaof" {
			t.Errorf("replica --%s %v, primary %v: want the same", flag, ra[flag], v)
		}
	}
	_, _, flags := stockpot(t, o.statefulSet(t, "stockpot-serve").Spec.Template.Spec)
	u, err := url.Parse(flags["remote-cache"][0])
	if err != nil {
		t.Fatal(err)
	}
	var replicaof []string // --replicaof takes two values: host and port
	if a := replica.Spec.Template.Spec.Containers[0].Args; slices.Index(a, "--replicaof") >= 0 && slices.Index(a, "--replicaof")+2 < len(a) {
		i := slices.Index(a, "--replicaof")
		replicaof = a[i+1 : i+3]
	}
	if want := []string{u.Hostname(), u.Port()}; !slices.Equal(replicaof, want) {
		t.Errorf("replica --replicaof %v, want %v (serve's --remote-cache)", replicaof, want)
	}
	if !slices.Equal(ra["tls-replication"], []string{"yes"}) || !slices.Equal(ra["masterauth"], pa["requirepass"]) {
		t.Errorf("replica --tls-replication %v --masterauth %v: want yes and the primary's --requirepass %v", ra["tls-replication"], ra["masterauth"], pa["requirepass"])
	}
	if o.service(u.Hostname()) == nil {
		t.Fatalf("serve's --remote-cache host %s is no Service", u.Hostname())
	}
	if sel := labels.SelectorFromSet(o.service(u.Hostname()).Spec.Selector); !sel.Matches(labels.Set(primary.Spec.Template.Labels)) || sel.Matches(labels.Set(replica.Spec.Template.Labels)) {
		t.Errorf("Service %s selects the primary %v, the replica %v: want the primary only", u.Hostname(),
			sel.Matches(labels.Set(primary.Spec.Template.Labels)), sel.Matches(labels.Set(replica.Spec.Template.Labels)))
	}
}
