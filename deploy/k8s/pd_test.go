package k8s_test

import (
	"fmt"
	"net/url"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestPrefillDecodePools checks pd/pools.yaml beside the base manifests: the prefill pool is
// a StatefulSet behind a headless Service (a DNS name per pod, since a transfer lives in one
// pod), the decode pool a Deployment whose --prefill-peer are exactly those names on the
// Service's port, one per prefill replica; both share the serve replicas' Redis (the prefill
// writing through), keys and Secrets; each Service selects its pool alone; every pod is
// probed on /health; and the pools are admitted to Redis.
func TestPrefillDecodePools(t *testing.T) {
	o := loadGlobs(t, "*.yaml", "pd/*.yaml")
	prefill := o.statefulSet(t, "stockpot-prefill")
	svc := o.service(prefill.Spec.ServiceName)
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("the prefill pool's Service %q is not headless (no DNS name per pod): %+v", prefill.Spec.ServiceName, svc)
	}
	var decodeW *workload
	for _, w := range o.workloads() {
		if w.name == "stockpot-decode" && w.kind == "Deployment" {
			decodeW = &w
		}
	}
	if decodeW == nil {
		t.Fatal("no Deployment stockpot-decode")
	}
	_, psub, pflags := stockpot(t, prefill.Spec.Template.Spec)
	_, dsub, dflags := stockpot(t, decodeW.pod.Spec)
	_, _, sflags := stockpot(t, o.statefulSet(t, "stockpot-serve").Spec.Template.Spec)
	if psub != "serve" || dsub != "serve" || !slices.Equal(pflags["role"], []string{"prefill"}) || !slices.Equal(dflags["role"], []string{"decode"}) {
		t.Fatalf("pools run %s --role=%v and %s --role=%v, want serve prefill and serve decode", psub, pflags["role"], dsub, dflags["role"])
	}
	var want []string
	for i := range *prefill.Spec.Replicas {
		want = append(want, fmt.Sprintf("http://%s-%d.%s:%d", prefill.Name, i, svc.Name, svc.Spec.Ports[0].Port))
	}
	if !slices.Equal(dflags["prefill-peer"], want) {
		t.Errorf("decode --prefill-peer %q, want each prefill pod by name %q", dflags["prefill-peer"], want)
	}
	for _, p := range dflags["prefill-peer"] {
		if u, err := url.Parse(p); err != nil || u.Port() != fmt.Sprint(svc.Spec.Ports[0].Port) {
			t.Errorf("--prefill-peer %s: not the prefill Service's port %d (%v)", p, svc.Spec.Ports[0].Port, err)
		}
	}
	if !slices.Equal(pflags["remote-write"], []string{"through"}) {
		t.Errorf("prefill --remote-write %v: want through (every block in Redis before a decode may need it)", pflags["remote-write"])
	}
	for _, f := range []string{"remote-cache", "remote-cache-ca-file", "remote-cache-password-file", "tier-key-file"} {
		if !slices.Equal(pflags[f], sflags[f]) || !slices.Equal(dflags[f], sflags[f]) {
			t.Errorf("--%s: prefill %v, decode %v, serve %v; want the one shared tier", f, pflags[f], dflags[f], sflags[f])
		}
	}
	if len(dflags["backend-key-file"]) != 1 || !slices.Equal(dflags["backend-key-file"], pflags["backend-key-file"]) ||
		!slices.Contains(pflags["admin-key-file"], dflags["backend-key-file"][0]) && !slices.Contains(pflags["api-key-file"], dflags["backend-key-file"][0]) {
		t.Errorf("the decode pulls with --backend-key-file %v, which the prefill (api %v, admin %v, backend %v) does not take",
			dflags["backend-key-file"], pflags["api-key-file"], pflags["admin-key-file"], pflags["backend-key-file"])
	}
	for _, name := range []string{"stockpot-prefill", "stockpot-decode"} {
		s := o.service(name)
		if s == nil {
			t.Fatalf("no Service %s", name)
		}
		n := 0
		for _, w := range o.workloads() {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
				n++
				if w.name != name {
					t.Errorf("Service %s selects %s %s", name, w.kind, w.name)
				}
			}
		}
		if n != 1 {
			t.Errorf("Service %s selects %d workloads, want its pool", name, n)
		}
	}
	for _, w := range o.workloads() {
		if w.name != "stockpot-prefill" && w.name != "stockpot-decode" {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", w.name, w.selector, w.pod.Labels)
		}
		c, _, _ := stockpot(t, w.pod.Spec)
		for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("%s: %s probe %+v, want GET /health on port http", w.name, what, p)
			}
		}
		admitted := false
		for _, np := range o.netpols {
			for _, rule := range np.Spec.Ingress {
				for _, from := range rule.From {
					if sel, err := metav1.LabelSelectorAsSelector(from.PodSelector); err == nil && sel.Matches(labels.Set(w.pod.Labels)) {
						admitted = true
					}
				}
			}
		}
		if !admitted {
			t.Errorf("%s: no NetworkPolicy admits its pods to Redis", w.name)
		}
	}
}
