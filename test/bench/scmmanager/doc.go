// Package scmmanager holds BenchmarkSCMEconomyManager: the SCM economy measured through the whole
// manager (the controllers as cmd/manager sets them up, a real kube-apiserver from envtest, the
// fake GitHub), with the naive REST poll and the SCM-level Poller measured in the same run on the
// same activity. Run it with `make bench-scm-manager`; see the benchmark file for the method.
package scmmanager
