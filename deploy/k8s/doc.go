// Package k8s holds Stockpot's Kubernetes manifests (the *.yaml beside this file: serve
// replicas as a StatefulSet with a disk-tier volume, the router, Redis, probes, disruption
// budgets). It has no Go code: its tests (k8s_test.go) decode every document strictly into the
// Kubernetes API types and check the objects against each other and against the flags
// stockpot serve and route accept, so a manifest that would not apply, or would start a
// replica with a flag that no longer exists, fails `make test`.
package k8s
