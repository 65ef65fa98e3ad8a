package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// Every flag the Kubernetes manifests (deploy/k8s) pass to stockpot serve and route exists in
// the real flag sets, with a value of the flag's type: the manifest's arguments plus -h are
// parsed by cmdServe and cmdRoute, which stop with flag.ErrHelp when every earlier argument
// parsed (an unknown flag or a bad value stops them first with another error). The checks of
// the objects themselves are in deploy/k8s.
func TestDeployManifestFlags(t *testing.T) {
	files, err := filepath.Glob("../../deploy/k8s/*.yaml")
	pools, perr := filepath.Glob("../../deploy/k8s/pd/*.yaml") // the prefill and decode pools
	if err != nil || perr != nil || len(files) == 0 || len(pools) == 0 {
		t.Fatalf("no manifests: %v %v", err, perr)
	}
	files = append(files, pools...)
	run := map[string]func([]string) error{"serve": cmdServe, "route": cmdRoute}
	seen := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(b, []byte("\n---")) {
			var w appsv1.Deployment // a StatefulSet's pod template sits at the same path
			if err := yaml.Unmarshal(doc, &w); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if w.Kind != "Deployment" && w.Kind != "StatefulSet" {
				continue
			}
			for _, c := range w.Spec.Template.Spec.Containers {
				if !slices.Equal(c.Command, []string{"stockpot"}) {
					continue
				}
				if len(c.Args) == 0 || run[c.Args[0]] == nil {
					t.Errorf("%s %s: stockpot %q, want serve or route", w.Kind, w.Name, c.Args)
					continue
				}
				for _, a := range c.Args[1:] {
					// --name=value only: a bare value would end flag parsing, and then -h would
					// be an argument and the command would start.
					if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") {
						t.Fatalf("%s %s: argument %q is not --name=value", w.Kind, w.Name, a)
					}
				}
				err := muted(t, func() error { return run[c.Args[0]](append(slices.Clone(c.Args[1:]), "-h")) })
				if !errors.Is(err, flag.ErrHelp) {
					t.Errorf("%s %s: stockpot %s %q: %v", w.Kind, w.Name, c.Args[0], c.Args[1:], err)
				}
				seen[c.Args[0]]++
			}
		}
	}
	if seen["serve"] == 0 || seen["route"] == 0 {
		t.Fatalf("manifests run serve %d and route %d times; want both", seen["serve"], seen["route"])
	}
	// The check itself: a flag that does not exist is caught.
	if err := muted(t, func() error { return cmdRoute([]string{"--no-such-flag=1", "-h"}) }); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Fatalf("an unknown flag passed: %v", err)
	}
}

// muted runs fn with os.Stderr (where a flag set prints its usage) sent to /dev/null.
func muted(t *testing.T, fn func() error) error {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	saved := os.Stderr
	os.Stderr = null
	defer func() { os.Stderr = saved }()
	return fn()
}
